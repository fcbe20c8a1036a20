"""All partition logs of a node, across its log dirs (Kafka's LogManager).

Each log dir root holds `meta.properties`, `recovery-point-offset-checkpoint`,
`log-start-offset-checkpoint`, `replication-offset-checkpoint` (high watermarks, supplied by the
server) and, between a clean shutdown and the next start, the `.kafka_cleanshutdown` marker,
holding Kafka's CleanShutdownFileHandler JSON `{"version":0,"brokerEpoch":N}`: the broker epoch
the node shut down with, which its next BrokerRegistration offers as previous_broker_epoch so
the controller can tell a clean restart from a crash (KIP-966).
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
recovery point (CRC scan, torn-tail truncation, index rebuild, producer-state rebuild). Logs
load in parallel, `recovery_threads` at a time per dir (Kafka's
num.recovery.threads.per.data.dir): the scans and file work release the GIL. Kafka's lines
("Recovering N logs from DIR since no clean shutdown file was found", "Loaded N logs in X ms")
frame the load, with a progress line every `PROGRESS_INTERVAL_S` while it lasts. The marker is
deleted once the dir is loaded, so a crash afterwards is treated as unclean.

Small checkpoints: a log's `partition.metadata` and `leader-epoch-checkpoint` fall behind memory
on some changes (see leader_epoch_cache.py); the log manager collects such logs and
`flush_dirty_metadata()` (a worker thread, woken through `on_metadata_dirty`) writes them, as
Kafka's scheduler does. A new partition's `partition.metadata` is written before `create_logs`
returns it (Kafka writes it before the first append).

Background tasks (Kafka's LogManager.startup schedules the same ones; `run` starts them all,
each reading its interval from the broker config): retention (`run_retention`, every
log.retention.check.interval.ms), the flush policy (`run_flusher`, flush.ms / flush.messages,
and `maybe_flush` after each append, which the replica manager calls), the recovery-point and
log-start-offset checkpoints (log.flush.offset.checkpoint.interval.ms,
log.flush.start.offset.checkpoint.interval.ms), producer-id expiration
(producer.id.expiration.check.interval.ms), the LogCleaner (log/cleaner.py, over the compacted
logs only) and the small checkpoints' flusher. Segments leave in two steps
(`schedule_segment_deletion`): renamed `*.deleted` at once, removed after file.delete.delay.ms,
so fetch responses already holding their file regions finish. The high watermarks' checkpoint
is the replica manager's (replication state, as in Kafka); this module only writes the file.
Each periodic pass yields to the event loop every `PASS_CHUNK` logs (thousands of partitions).

Shutdown: `shutdown()` flushes every log, closes it (checkpoints, producer snapshots, trimmed
indexes), writes the dir checkpoints and then the marker.

Concurrency: `load`, `create_logs`, `delete_logs`, `remove_logs`, `checkpoint*`, `shutdown`,
`purge_deleted` and `flush_dirty_metadata` block on disk and run in worker threads;
`detach_log` (forget a log, no disk work), `maybe_flush`, `track_compacted`,
`schedule_segment_deletion` and the `run_*` tasks run on the event loop, and hand their blocking
work to worker threads (`trio.to_thread`) or to tasks started with `spawn` (a nursery's
start_soon, shared with the replica manager as Kafka shares its scheduler). `_lock` guards the
log table and the dirty set against those threads; `_checkpoint_lock` makes one writer of the
checkpoint files at a time.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import trio

from pybroker.clock import SYSTEM_CLOCK, Clock
from pybroker.config import BrokerConfig
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
from pybroker.log.log import UnifiedLog, log_dir_name, mark_segments_deleted, parse_log_dir_name
from pybroker.log.meta_properties import MetaProperties, ensure_log_dirs
from pybroker.log.producer_state import DEFAULT_PRODUCER_ID_EXPIRATION_MS
from pybroker.metrics.histogram import Histogram

logger = logging.getLogger("pybroker.log")

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PROGRESS_INTERVAL_S = 5.0  # a progress line this often while logs load
PARALLEL_MIN_BYTES = 1 << 20  # a log this large is recovered by the recovery threads
IO_THREADS = 8  # logs created (create_logs) or closed (shutdown) at once: their time is fsync waits
PASS_CHUNK = 500  # logs a periodic pass visits between two yields to the event loop
METADATA_RETRY_S = 10.0  # small checkpoints that failed to write are tried again this often


def read_clean_shutdown_epoch(marker: Path) -> int | None:
    """The broker epoch in a clean-shutdown marker; None when it holds none (an empty marker
    from an older pybroker, or unreadable: Kafka's CleanShutdownFileHandler.read)."""
    import json

    try:
        content = json.loads(marker.read_bytes())
        return int(content["brokerEpoch"]) if content.get("version") == 0 else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None


def _log_bytes(dir: Path, names: list[str]) -> int:
    """Bytes of the segments (.log files) in a partition dir."""
    total = 0
    for name in names:
        if name.endswith(".log"):
            try:
                total += os.stat(dir / name).st_size
            except FileNotFoundError:
                pass
    return total
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
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 recovery_threads: int = 2, config: BrokerConfig | None = None, clock: Clock = SYSTEM_CLOCK,
                 spawn: Callable[..., Any] | None = None) -> None:
        """`topic_config(topic)` returns the topic's LogConfig (broker defaults + overrides) for
        logs found on disk; it defaults to `default_config` for every topic. `recovery_threads`
        logs load at once per dir (num.recovery.threads.per.data.dir). The background tasks read
        their intervals from `config` (the broker's, updated in place by dynamic configs; its
        defaults when None) and the time from `clock`; `spawn` (a nursery's start_soon) runs the
        flushes and delayed deletions, and must be set before the first of them."""
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
        # one writer of the checkpoint files at a time: the periodic checkpointer's worker thread
        # and shutdown's raced on "<file>.tmp" (one renamed it from under the other)
        self._checkpoint_lock = threading.Lock()
        self._shut_down = False  # after shutdown's checkpoint, no periodic one overwrites it
        self.had_clean_shutdown: dict[Path, bool] = {}
        # the broker epoch every dir's clean-shutdown marker names, else -1 (Kafka's
        # readBrokerEpochFromCleanShutdownFiles): set by load()
        self.previous_broker_epoch = -1
        # partitions with a move in progress -> the FutureLogCopy being built (event loop only)
        self.future_logs: dict[TopicPartition, FutureLogCopy] = {}
        self.recovery_threads = max(1, recovery_threads)
        # logs whose small checkpoints are behind memory, and who to tell when the set fills
        # (any thread; the replica manager wakes its flusher through the trio token)
        self._dirty_metadata: dict[int, UnifiedLog] = {}
        self.on_metadata_dirty: Callable[[], None] | None = None
        # the background tasks (event loop only)
        self.config = config if config is not None else BrokerConfig()
        # tiered storage on this node (a log of a topic with remote.storage.enable is tiered)
        self.remote_storage_system_enable = bool(self.config["remote.log.storage.system.enable"])
        self.clock = clock
        self.spawn = spawn
        self.log_flush_stats = Histogram()  # Kafka's LogFlushRateAndTimeMs, read when scraped
        self._flushing: set[int] = set()  # id() of the logs a worker thread flushes: one at a time each
        self._compacted: dict[TopicPartition, UnifiedLog] = {}  # cleanup.policy has compact: the cleaner's view
        self._metadata_dirty: trio.Event | None = None  # set when a log's small checkpoints fall behind

    # -- startup ---------------------------------------------------------------------------
    def load(self, now_ms: int) -> None:
        """Format/validate the dirs and open (recovering if needed) every log. Blocking."""
        started = time.monotonic()
        self.cluster_id, self.meta = ensure_log_dirs(self.log_dirs, self.node_id, self.cluster_id)
        futures: list[tuple[Path, TopicPartition]] = []
        unclean: list[str] = []
        epochs: list[int | None] = []
        total = 0
        for log_dir in self.log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            self.had_clean_shutdown[log_dir] = clean
            epochs.append(read_clean_shutdown_epoch(marker) if clean else None)
            recovery_points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read()
            start_offsets = OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).read()
            to_load: list[tuple[Path, TopicPartition]] = []
            seen: dict[TopicPartition, Path] = {}
            for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
                if not entry.is_dir():
                    continue
                child = Path(entry.path)
                if entry.name.endswith(DELETE_DIR_SUFFIX):
                    self._pending_deletes.append((child, None))
                    continue
                if entry.name == METADATA_LOG_DIR_NAME:
                    continue  # the KRaft metadata log is opened by the controller, not here
                future_tp = parse_future_dir_name(entry.name)
                if future_tp is not None:
                    futures.append((child, future_tp))
                    continue
                tp = parse_log_dir_name(entry.name)
                if tp is None:
                    continue  # -future / -stray dirs and foreign dirs are left alone
                if tp in self.logs or tp in seen:
                    where = self._log_dir_of[tp] / child.name if tp in self.logs else seen[tp]
                    raise KafkaStorageError(f"duplicate log directories for {tp[0]}-{tp[1]}: {where} and {child}")
                seen[tp] = child
                to_load.append((child, tp))
            total += len(to_load)
            if not to_load:
                logger.info("No logs found to be loaded in %s", log_dir)
            elif clean:
                logger.info("Skipping recovery of %d logs from %s since clean shutdown file was found",
                            len(to_load), log_dir)
            else:
                logger.info("Recovering %d logs from %s since no clean shutdown file was found", len(to_load), log_dir)
                unclean.append(str(log_dir))

            def open_log(child: Path, tp: TopicPartition, names: list[str], clean: bool = clean,
                         recovery_points: dict[TopicPartition, int] = recovery_points,
                         start_offsets: dict[TopicPartition, int] = start_offsets) -> UnifiedLog:
                return UnifiedLog(child, self._topic_config(tp[0]), topic=tp[0], partition=tp[1],
                                  log_start_offset=start_offsets.get(tp, 0),
                                  recovery_point=recovery_points.get(tp, 0),
                                  clean_shutdown=clean, now_ms=now_ms,
                                  producer_id_expiration_ms=self.producer_id_expiration_ms, names=names,
                                  remote_storage_system_enable=self.remote_storage_system_enable)

            loaded = self._load_dir(log_dir, to_load, open_log, clean)
            for (_child, tp), plog in zip(to_load, loaded, strict=True):
                self._adopt(tp, plog, log_dir)
            if clean:
                marker.unlink()
                fsync_dir(log_dir)
        for child, tp in futures:
            self._resolve_future_dir(child, tp, now_ms)
        self.purge_deleted()
        # one epoch named by every dir's marker, else none to offer (readBrokerEpochFromCleanShutdownFiles)
        found = set(epochs)
        only = next(iter(found)) if len(found) == 1 else None
        self.previous_broker_epoch = only if only is not None else -1
        logger.info("Loaded %d logs in %dms%s", total, (time.monotonic() - started) * 1000,
                    f" (unclean log dirs = [{', '.join(unclean)}])" if unclean else "")

    def _load_dir(self, log_dir: Path, to_load: list[tuple[Path, TopicPartition]],
                  open_log: Callable[[Path, TopicPartition, list[str]], UnifiedLog], clean: bool) -> list[UnifiedLog]:
        """Open every log of one dir, logging progress meanwhile; the first failure is raised once
        the logs already started have finished.

        After an unclean shutdown, logs holding at least PARALLEL_MIN_BYTES of segments are
        recovered by `recovery_threads` worker threads: their CRC scans release the GIL. The
        others (and every log after a clean shutdown) are opened by this thread, one after the
        other: opening a small log is a dozen file operations with Python in between, and threads
        taking the GIL back after each of them made 10,000 small logs load slower (measured:
        ~1.9 s on one thread, 2.4-5 s on two to four)."""
        if not to_load:
            return []
        started = time.monotonic()
        results: list[UnifiedLog | None] = [None] * len(to_load)
        listings: list[list[str]] = []
        big: list[int] = []
        for i, (child, _tp) in enumerate(to_load):
            names = os.listdir(child)
            listings.append(names)
            if not clean and self.recovery_threads > 1 and _log_bytes(child, names) >= PARALLEL_MIN_BYTES:
                big.append(i)
        done = 0
        last_report = started

        def report() -> None:
            nonlocal last_report
            now = time.monotonic()
            if now - last_report >= PROGRESS_INTERVAL_S:
                last_report = now
                logger.info("%s logs in %s: %d/%d completed in %.1f s", "Loading" if clean else "Recovering",
                            log_dir, done, len(to_load), now - started)

        with ThreadPoolExecutor(min(self.recovery_threads, max(1, len(big))),
                                thread_name_prefix="log-recovery") as pool:
            jobs: dict[Future[UnifiedLog], int] = {
                pool.submit(open_log, to_load[i][0], to_load[i][1], listings[i]): i for i in big}
            try:
                in_pool = set(big)
                for i, (child, tp) in enumerate(to_load):
                    if i in in_pool:
                        continue
                    results[i] = open_log(child, tp, listings[i])
                    done += 1
                    report()
                pending = set(jobs)
                while pending:
                    finished, pending = wait(pending, timeout=max(0.0, PROGRESS_INTERVAL_S - (time.monotonic() - last_report)),
                                             return_when=FIRST_EXCEPTION)
                    for f in finished:
                        results[jobs[f]] = f.result()  # raises the first failure
                        done += 1
                    report()
            except BaseException:
                for f in jobs:
                    f.cancel()
                raise
        loaded = [r for r in results if r is not None]
        segments = sum(plog.recovered_segments for plog in loaded)
        if segments:
            logger.info("Recovered %d segments (%.1f MB) of %d logs in %s in %dms (%d in %d threads)", segments,
                        sum(plog.recovered_bytes for plog in loaded) / 1e6, len(loaded), log_dir,
                        (time.monotonic() - started) * 1000, len(big), self.recovery_threads if big else 0)
        return loaded

    def _adopt(self, tp: TopicPartition, plog: UnifiedLog, log_dir: Path) -> None:
        """Enter a loaded or new log in the table and watch its small checkpoints."""
        plog.on_metadata_dirty = self._note_metadata_dirty
        with self._lock:
            self.logs[tp] = plog
            self._set_dir(tp, log_dir)
        if plog.metadata_dirty:
            self._note_metadata_dirty(plog)

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
        self._adopt(tp, UnifiedLog(target, self._topic_config(tp[0]), topic=tp[0], partition=tp[1],
                                   clean_shutdown=False, now_ms=now_ms,
                                   producer_id_expiration_ms=self.producer_id_expiration_ms,
                                   remote_storage_system_enable=self.remote_storage_system_enable), log_dir)

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
                          config: LogConfig | None = None, *, now_ms: int = 0, flush: bool = True) -> UnifiedLog:
        """The log of the partition, created if there is none. An existing log found without a
        topic id gets it (written by the next metadata flush, as Kafka's assignTopicId); a new
        log is made on disk here (blocking: see create_logs), its partition.metadata written
        before it is returned (Kafka writes it before the first append) unless `flush` is False
        (the caller then calls `flush_metadata()` itself, before handing the log out)."""
        tp = (topic, partition)
        plog = self.logs.get(tp)
        if plog is not None:
            if topic_id is not None:
                plog.assign_topic_id(topic_id)
            return plog
        with self._lock:
            log_dir = self._next_log_dir()
            self._dir_counts[log_dir] = self._dir_counts.get(log_dir, 0) + 1  # reserved meanwhile
        try:
            plog = UnifiedLog(log_dir / log_dir_name(topic, partition), config or self._topic_config(topic),
                              topic=topic, partition=partition, topic_id=topic_id, now_ms=now_ms,
                              producer_id_expiration_ms=self.producer_id_expiration_ms,
                              remote_storage_system_enable=self.remote_storage_system_enable)
            if flush:
                plog.flush_metadata()
        finally:
            with self._lock:
                self._dir_counts[log_dir] -= 1
        self._adopt(tp, plog, log_dir)
        return plog

    def create_logs(self, specs: list[tuple[str, int, bytes | None, LogConfig, int | None]], now_ms: int
                    ) -> list[UnifiedLog | Exception]:
        """get_or_create_log for many partitions, (topic, partition, topic id, config, leader epoch)
        each; a leader epoch (None when this node does not lead) starts at the log end offset and
        its leader-epoch-checkpoint is written before the log is returned, as Kafka's makeLeader
        does. A partition that cannot be made (a disk error, a stale directory of another topic
        id) gets its exception in the result instead of a log; the others are made.

        Blocking: meant for a worker thread. A new partition is a directory, a .log file and two
        small fsynced checkpoints, nearly all of it waiting on the disk, so IO_THREADS make
        them at once (their fsyncs then share the file system's journal commits)."""
        def create(spec: tuple[str, int, bytes | None, LogConfig, int | None]) -> UnifiedLog | Exception:
            topic, partition, topic_id, config, leader_epoch = spec
            try:
                plog = self.get_or_create_log(topic, partition, topic_id, config, now_ms=now_ms, flush=False)
                if leader_epoch is not None:
                    plog.maybe_assign_epoch_start_offset(leader_epoch, plog.log_end_offset)
                plog.flush_metadata()  # both small checkpoints, one fsync of the dir
            except (OSError, LogError) as exc:
                return exc
            return plog

        # one creation per partition, however often it is named: two threads must never make
        # the same partition (they would pick two log dirs)
        unique = list({(spec[0], spec[1]): spec for spec in specs}.values())
        if len(unique) < 2:
            made = [create(spec) for spec in unique]
        else:
            with ThreadPoolExecutor(min(IO_THREADS, len(unique)), thread_name_prefix="log-create") as pool:
                made = list(pool.map(create, unique))
        by_tp = {(spec[0], spec[1]): result for spec, result in zip(unique, made, strict=True)}
        return [by_tp[(spec[0], spec[1])] for spec in specs]

    # -- small checkpoints -----------------------------------------------------------------
    def _note_metadata_dirty(self, plog: UnifiedLog) -> None:
        with self._lock:
            first = not self._dirty_metadata
            self._dirty_metadata[id(plog)] = plog
        if first and self.on_metadata_dirty is not None:
            self.on_metadata_dirty()

    def has_dirty_metadata(self) -> bool:
        return bool(self._dirty_metadata)

    def flush_dirty_metadata(self) -> int:
        """Write the partition.metadata and leader-epoch-checkpoint files that are behind memory;
        returns how many logs were flushed. Blocking: a worker thread. A log that fails (a disk
        error) is logged and kept for the next call (no wake-up: the caller retries later)."""
        with self._lock:
            dirty, self._dirty_metadata = list(self._dirty_metadata.values()), {}
        for plog in dirty:
            try:
                plog.flush_metadata()
            except OSError as exc:
                logger.error("cannot write the checkpoints of %s: %s", plog, exc)
                with self._lock:
                    self._dirty_metadata.setdefault(id(plog), plog)
        return len(dirty)

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

    def detach_log(self, topic: str, partition: int) -> tuple[UnifiedLog, Path] | None:
        """Forget the partition's log (no disk work: event loop). Hand the result to
        `delete_logs` (a worker thread) before a log of the same name is created again."""
        tp = (topic, partition)
        with self._lock:
            plog = self.logs.pop(tp, None)
            log_dir = self._pop_dir(tp)
            self._dirty_metadata.pop(id(plog), None)
        self._compacted.pop(tp, None)
        if plog is None or log_dir is None:
            return None
        return plog, log_dir

    def delete_logs(self, detached: list[tuple[UnifiedLog, Path]]) -> list[Path | OSError]:
        """Rename each detached log's dir to `<tp>.<uuid hex>-delete` (one fsync per log dir for
        them all); their files are closed and removed later by `purge_deleted()`, which also
        gives in-flight sendfile regions time to finish. Blocking: a worker thread. Returns the
        new path of each, or the OSError that kept it in place (its files stay for an operator)."""
        out: list[Path | OSError] = []
        touched: set[Path] = set()
        for plog, log_dir in detached:
            target = log_dir / delete_dir_name(plog.topic, plog.partition)
            try:
                os.replace(plog.dir, target)
            except OSError as exc:
                out.append(exc)
                continue
            touched.add(log_dir)
            self._pending_deletes.append((target, plog))
            out.append(target)
        for log_dir in touched:
            fsync_dir(log_dir)
        return out

    def delete_log(self, topic: str, partition: int) -> Path | None:
        """`detach_log` + `delete_logs` for one partition (blocking)."""
        detached = self.detach_log(topic, partition)
        if detached is None:
            return None
        (result,) = self.delete_logs([detached])
        if isinstance(result, OSError):
            raise result
        return result

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
                                     producer_id_expiration_ms=self.producer_id_expiration_ms,
                                     remote_storage_system_enable=self.remote_storage_system_enable)
            except BaseException:
                os.replace(target, future_dir)
                raise
        except BaseException:
            os.replace(deleted, log.dir)
            raise
        new_log.recovery_point = min(max(recovery_point, new_log.log_start_offset), new_log.log_end_offset)
        new_log.high_watermark = log.high_watermark
        new_log.last_flush_ms = log.last_flush_ms
        new_log.mark_metadata_dirty()  # the copy's small files were written without fsync
        self._adopt(tp, new_log, dst_root)
        if tp in self._compacted:
            self._compacted[tp] = new_log
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

    def remove_logs(self, detached: list[tuple[UnifiedLog, Path]]) -> None:
        """`delete_logs` then `purge_deleted` for logs `detach_log` gave (a deleted partition's);
        blocking: a worker thread, or the start-up thread. A log that cannot be renamed is
        logged and forgotten; its files stay for an operator. Empties `detached`."""
        if not detached:
            return
        for (plog, _), result in zip(detached, self.delete_logs(detached), strict=True):
            if isinstance(result, OSError):
                logger.error("cannot delete the log of %s-%d: %s", plog.topic, plog.partition, result)
        self.purge_deleted()
        # these are the logs' last references: free them here, one at a time, rather than all at
        # once on the event loop when the caller's frame goes (10,000 logs took ~50 ms there)
        while detached:
            detached.pop()

    # -- checkpoints -----------------------------------------------------------------------
    def checkpoint(self, high_watermarks: dict[TopicPartition, int] | None = None) -> None:
        """Write recovery-point and log-start-offset checkpoints (and HWs when given). Blocking."""
        with self._checkpoint_lock:
            if not self._shut_down:
                self._write_checkpoints(high_watermarks)

    def checkpoint_recovery_points(self) -> None:
        """Write each dir's recovery-point-offset-checkpoint (Kafka's
        checkpointLogRecoveryOffsets). Blocking."""
        with self._checkpoint_lock:
            if not self._shut_down:
                self._write_checkpoints(None, start_offsets=False)

    def checkpoint_log_start_offsets(self) -> None:
        """Write each dir's log-start-offset-checkpoint (Kafka's checkpointLogStartOffsets).
        Blocking."""
        with self._checkpoint_lock:
            if not self._shut_down:
                self._write_checkpoints(None, recovery_points=False)

    def _write_checkpoints(self, high_watermarks: dict[TopicPartition, int] | None, *,
                           recovery_points: bool = True, start_offsets: bool = True) -> None:
        with self._lock:
            by_dir: dict[Path, list[tuple[TopicPartition, UnifiedLog]]] = {d: [] for d in self.log_dirs}
            for tp, log in self.logs.items():
                by_dir[self._log_dir_of[tp]].append((tp, log))
        for log_dir, entries in by_dir.items():
            if recovery_points:
                OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write(
                    {tp: log.recovery_point for tp, log in entries})
            if start_offsets:
                # Kafka lists only logs whose start offset moved past their first segment, and
                # every tiered log (its start may be below its first segment: the remote part)
                OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT).write(
                    {tp: log.log_start_offset for tp, log in entries
                     if log.remote_log_enabled or log.log_start_offset > log.segments[0].base_offset})
            if high_watermarks is not None:
                OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).write(
                    {tp: high_watermarks[tp] for tp, _ in entries if tp in high_watermarks})

    def checkpoint_high_watermarks(self, high_watermarks: dict[TopicPartition, int]) -> None:
        """Write each dir's replication-offset-checkpoint (Kafka's checkpointHighWatermarks, every
        replica.high.watermark.checkpoint.interval.ms). Blocking."""
        with self._lock:
            by_dir: dict[Path, list[TopicPartition]] = {d: [] for d in self.log_dirs}
            for tp in self.logs:
                by_dir[self._log_dir_of[tp]].append(tp)
        with self._checkpoint_lock:
            if self._shut_down:
                return
            for log_dir, tps in by_dir.items():
                OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT).write(
                    {tp: high_watermarks[tp] for tp in tps if tp in high_watermarks})

    def shutdown(self, now_ms: int, high_watermarks: dict[TopicPartition, int] | None = None,
                 broker_epoch: int = -1) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker. Blocking.

        Logs are flushed and closed IO_THREADS at a time (Kafka uses its recovery threads): it is
        nearly all fsync waits, ~3 per log, which then share journal commits (10,000 logs took
        8.5 s one at a time)."""
        def flush_and_close(plog: UnifiedLog) -> None:
            plog.flush(now_ms=now_ms)
            plog.close()

        logs = list(self.logs.values())
        if len(logs) > 1:
            with ThreadPoolExecutor(min(IO_THREADS, len(logs)), thread_name_prefix="log-shutdown") as pool:
                for _ in pool.map(flush_and_close, logs):  # raises the first failure
                    pass
        else:
            for plog in logs:
                flush_and_close(plog)
        with self._checkpoint_lock:
            self._write_checkpoints(high_watermarks)
            self._shut_down = True
        self.purge_deleted()
        content = f'{{"version":0,"brokerEpoch":{broker_epoch}}}'.encode()
        for log_dir in self.log_dirs:
            fd = os.open(log_dir / CLEAN_SHUTDOWN_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, content)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(log_dir)

    # -- background tasks (event loop) ------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every periodic task of the log manager (Kafka's LogManager.startup) and run
        them until cancelled."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self.run_metadata_flusher)
            await nursery.start(self.run_flusher)
            await nursery.start(self.run_recovery_point_checkpointer)
            await nursery.start(self.run_log_start_offset_checkpointer)
            await nursery.start(self.run_retention)
            await nursery.start(self.run_producer_expiration)
            await nursery.start(self.run_cleaner)
            task_status.started()

    def _start_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.spawn is None:
            raise RuntimeError("LogManager.spawn is not set: its flushes and deletions need a nursery")
        self.spawn(fn, *args)

    def _hosted(self) -> list[UnifiedLog]:
        """The logs now in the table, for one pass (worker threads add logs meanwhile)."""
        with self._lock:
            return list(self.logs.values())

    def maybe_flush(self, plog: UnifiedLog) -> None:
        """Flush `plog` in a worker thread if its flush policy is due (flush.messages, flush.ms,
        or a rolled segment not yet flushed: UnifiedLog.needs_flush), unless a flush of it is
        still running. Called after each append (the replica manager, leader and follower) and
        by the flusher's pass."""
        if plog.needs_flush(self.clock.wall_ms()) and id(plog) not in self._flushing:
            self._flushing.add(id(plog))
            self._start_soon(self._flush, plog)

    async def _flush(self, plog: UnifiedLog) -> None:
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
            logger.exception("flush of %s failed", plog)
        finally:
            self._flushing.discard(id(plog))

    def flush_check_interval_s(self) -> float:
        """How often the flusher's pass runs: log.flush.scheduler.interval.ms, and at least as
        often as the offset checkpoints (log.flush.offset.checkpoint.interval.ms,
        replica.high.watermark.checkpoint.interval.ms). The pass used to ride those checkpoints'
        timer; the bound keeps a topic's flush.ms honoured within seconds when the scheduler
        interval is left at its default (Long.MAX_VALUE, where Kafka's flusher never runs)."""
        tick = min(max(0.1, self.config["log.flush.offset.checkpoint.interval.ms"] / 1000),
                   max(0.1, self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000))
        flush_interval_ms = self.config["log.flush.scheduler.interval.ms"]
        if flush_interval_ms < 2**62:
            tick = min(tick, flush_interval_ms / 1000)
        return max(0.05, tick)

    async def run_flusher(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Kafka's log flusher (flushDirtyLogs): every `flush_check_interval_s`, flush the logs
        whose flush policy is due (`maybe_flush`), yielding to the loop every `PASS_CHUNK` logs."""
        task_status.started()
        interval_s = self.flush_check_interval_s()
        while True:
            await trio.sleep(interval_s)
            for i, plog in enumerate(self._hosted()):
                if i and i % PASS_CHUNK == 0:
                    await trio.lowlevel.checkpoint()
                self.maybe_flush(plog)

    async def _run_checkpoint(self, interval_name: str, write: Callable[[], None], what: str,
                              task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        interval_s = max(0.1, self.config[interval_name] / 1000)
        while True:
            await trio.sleep(interval_s)
            try:
                await trio.to_thread.run_sync(write)
            except Exception:
                logger.exception("%s checkpoint failed", what)

    async def run_recovery_point_checkpointer(self, *,
                                              task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every log.flush.offset.checkpoint.interval.ms, write the recovery points (Kafka's
        kafka-recovery-point-checkpoint task): a restart after a crash recovers each log from
        there."""
        await self._run_checkpoint("log.flush.offset.checkpoint.interval.ms", self.checkpoint_recovery_points,
                                   "recovery point", task_status)

    async def run_log_start_offset_checkpointer(self, *,
                                                task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                                                ) -> None:
        """Every log.flush.start.offset.checkpoint.interval.ms, write the log start offsets
        (Kafka's kafka-log-start-offset-checkpoint task)."""
        await self._run_checkpoint("log.flush.start.offset.checkpoint.interval.ms",
                                   self.checkpoint_log_start_offsets, "log start offset", task_status)

    def schedule_segment_deletion(self, plog: UnifiedLog, segments: list[Any], snapshots: bool = True) -> None:
        """Rename detached segments' files `*.deleted` at once and remove them after
        file.delete.delay.ms, both in worker threads (the delay lets fetch responses already
        holding their file regions finish). Segments already renamed stay as they are.
        `snapshots` False: leave the producer snapshots named by their base offsets (a
        truncation's segments: their offsets may be the live log's again by then)."""
        if segments:
            self._start_soon(self._delete_later, plog, segments, plog.config.file_delete_delay_ms, snapshots)

    async def _delete_later(self, plog: UnifiedLog, segments: list[Any], delay_ms: int,
                            snapshots: bool = True) -> None:
        try:
            try:
                await trio.to_thread.run_sync(mark_segments_deleted, segments)
            except OSError:
                logger.exception("renaming deleted segments of %s failed", plog)
            await trio.sleep(delay_ms / 1000)
        finally:
            # shielded: at shutdown the files still go (a restart would remove them anyway)
            with trio.CancelScope(shield=True):
                try:
                    await trio.to_thread.run_sync(plog.delete_segment_files, segments, snapshots)
                except OSError:
                    logger.exception("removing deleted segments of %s failed", plog)

    async def enforce_retention(self, now_ms: int) -> int:
        """One pass of Kafka's log retention (cleanupLogs' deletion half) over every log,
        yielding to the loop every `PASS_CHUNK` logs; returns segments removed."""
        removed = 0
        for i, plog in enumerate(self._hosted()):
            if i and i % PASS_CHUNK == 0:
                await trio.lowlevel.checkpoint()
            if self.logs.get((plog.topic, plog.partition)) is not plog:
                continue  # deleted meanwhile
            if plog.retention_roll_due(now_ms):  # tiered: roll it so it is copied, then removed
                plog.roll(now_ms)
                continue
            if len(plog.segments) < 2:
                continue  # retention never removes the active segment
            start = plog.retention_start_offset(now_ms)
            if start is None:
                continue
            # a tiered log's local retention keeps the log start offset (the data is remote)
            doomed = (plog.increment_local_log_start_offset(start) if plog.remote_log_copy_enabled
                      else plog.increment_log_start_offset(start))
            removed += len(doomed)
            self.schedule_segment_deletion(plog, doomed)
        return removed

    async def run_retention(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every log.retention.check.interval.ms, delete segments retention no longer keeps."""
        task_status.started()
        interval_s = self.config["log.retention.check.interval.ms"] / 1000
        while True:
            await trio.sleep(interval_s)
            removed = await self.enforce_retention(self.clock.wall_ms())
            if removed:
                logger.info("retention removed %d segment(s)", removed)

    async def expire_producers(self, now_ms: int) -> None:
        """Forget the producers idle for producer.id.expiration.ms in every log (Kafka's
        UnifiedLog.removeExpiredProducers), yielding to the loop every `PASS_CHUNK` logs."""
        for i, plog in enumerate(self._hosted()):
            if i and i % PASS_CHUNK == 0:
                await trio.lowlevel.checkpoint()
            if plog.producer_state.producers:
                plog.remove_expired_producers(now_ms)

    async def run_producer_expiration(self, *,
                                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Every producer.id.expiration.check.interval.ms, `expire_producers`."""
        task_status.started()
        interval_s = self.config["producer.id.expiration.check.interval.ms"] / 1000
        while True:
            await trio.sleep(interval_s)
            await self.expire_producers(self.clock.wall_ms())

    def track_compacted(self, plog: UnifiedLog) -> None:
        """Keep the cleaner's index of the logs whose cleanup.policy has compact: call when a
        hosted log gets its topic's config (the cleaner visits these only, not every log)."""
        tp = (plog.topic, plog.partition)
        if plog.config.compact:
            self._compacted[tp] = plog
        else:
            self._compacted.pop(tp, None)

    async def run_cleaner(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Kafka's LogCleaner: compact logs with cleanup.policy=compact (pybroker/log/cleaner.py),
        then sleep log.cleaner.backoff.ms when a pass found nothing to clean."""
        from pybroker.log.cleaner import LogCleaner

        task_status.started()
        if not self.config["log.cleaner.enable"]:
            return
        cleaner = LogCleaner(self, self.schedule_segment_deletion)
        while True:
            # read every pass: log.cleaner.backoff.ms is a dynamic broker config
            backoff_s = max(0.01, self.config["log.cleaner.backoff.ms"] / 1000)
            logs = list(self._compacted.values())  # not a walk of every log
            try:
                cleaned = await cleaner.clean_logs(logs, self.clock.wall_ms())
            except Exception:  # a cleaner bug must not take the broker down; Kafka marks the dir
                logger.exception("log cleaner pass failed")
                cleaned = 0
            if not cleaned:
                await trio.sleep(backoff_s)
            else:
                await trio.lowlevel.checkpoint()

    async def run_metadata_flusher(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the logs' partition.metadata and leader-epoch-checkpoint files that fell behind
        memory, in a worker thread, as soon as one does (Kafka schedules such a flush at once);
        `on_metadata_dirty` wakes it from any thread through the trio token."""
        token = trio.lowlevel.current_trio_token()
        dirty = self._metadata_dirty = trio.Event()

        def wake() -> None:
            try:
                token.run_sync_soon(self._wake_metadata_flusher)
            except trio.RunFinishedError:
                pass  # shut down: shutdown() closes (and so flushes) every log

        self.on_metadata_dirty = wake
        dirty.set()  # whatever loading left behind
        task_status.started()
        while True:
            with trio.move_on_after(METADATA_RETRY_S):  # logs that failed to write are retried
                await dirty.wait()
            dirty = self._metadata_dirty = trio.Event()
            if not self.has_dirty_metadata():
                continue
            try:
                await trio.to_thread.run_sync(self.flush_dirty_metadata)
            except Exception:
                logger.exception("writing the logs' small checkpoints failed")

    def _wake_metadata_flusher(self) -> None:
        if self._metadata_dirty is not None:
            self._metadata_dirty.set()
