"""The `__cluster_metadata-0` partition on disk (Kafka's KafkaMetadataLog).

Directory `<metadata.log.dir>/__cluster_metadata-0/`:

    00000000000000000000.log / .index / .timeindex   segments of record batches v2 whose
                                                     partitionLeaderEpoch is the writing leader's
    leader-epoch-checkpoint                          epoch -> start offset (version 0)
    partition.metadata                               topic_id AAAAAAAAAAAAAAAAAAAAAQ
    quorum-state                                     the election state (quorum_state_store.py)
    <offset 20 digits>-<epoch 10 digits>.checkpoint  snapshots (snapshots.py)

Storage is pybroker's own log (pybroker.log.log.UnifiedLog), with Kafka's metadata settings:
no time or size retention of its own (metadata.log.segment.bytes 1 GiB per segment); the log
start only moves when cleaning behind a snapshot (`delete_before_snapshot`, driven by
metadata.max.retention.bytes 100 MiB and metadata.max.retention.ms 7 days): segments wholly below
the new start are detached at once and their files, with those of forgotten snapshots, removed
by the driver in a worker thread (`take_deferred`).

Opening recovers the log (a full scan, as Kafka's metadata log always opens unclean), removes
`.checkpoint.part` and `.checkpoint.deleted` leftovers and snapshots below the log start, and,
when the latest snapshot is ahead of the log (a follower crashed after downloading it), empties
the log to start at it.

Concurrency: construct and `close` in a worker thread (they block). Reads, appends and
truncation run on the Raft client's thread and touch only the page cache (a truncation that
drops whole segments deletes their files at once; it is rare). `flush` runs in the driver's
worker thread while the client waits. Snapshots are registered under a lock, since a state
machine may freeze its snapshot in another thread.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path

from pybroker._native import records as _records
from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.quorum_config import MAX_BATCH_SIZE_BYTES
from pybroker.raft.raft_log import LogAppendInfo, RaftLogError, ReplicatedLog
from pybroker.raft.raft_util import METADATA_PARTITION, METADATA_TOPIC, METADATA_TOPIC_ID
from pybroker.raft.snapshots import (
    DELETE_SUFFIX,
    PARTIAL_SUFFIX,
    SUFFIX,
    FileRawSnapshotReader,
    FileRawSnapshotWriter,
    RawSnapshotWriter,
    parse_snapshot_file_name,
    snapshot_file_name,
)

METADATA_DIR = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
METADATA_LOG_SEGMENT_BYTES = "metadata.log.segment.bytes"
METADATA_MAX_RETENTION_BYTES = "metadata.max.retention.bytes"
METADATA_MAX_RETENTION_MS = "metadata.max.retention.ms"
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_RETENTION_BYTES = 100 * 1024 * 1024
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000


class KafkaMetadataLog(ReplicatedLog):
    def __init__(self, metadata_log_dir: str | os.PathLike[str], *,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES,
                 retention_bytes: int = DEFAULT_RETENTION_BYTES,
                 retention_ms: int = DEFAULT_RETENTION_MS, now_ms: int = 0) -> None:
        """Open and recover (blocking: call from a worker thread)."""
        self.dir = Path(metadata_log_dir) / METADATA_DIR
        self.retention_bytes = retention_bytes
        self.retention_ms = retention_ms
        config = LogConfig().with_overrides({
            "segment.bytes": segment_bytes,
            "max.message.bytes": MAX_BATCH_SIZE_BYTES + 1024,
            "retention.ms": -1,
            "retention.bytes": -1,
        })
        self.log = UnifiedLog(self.dir, config, topic=METADATA_TOPIC, partition=METADATA_PARTITION,
                              topic_id=METADATA_TOPIC_ID, recovery_point=0, clean_shutdown=False,
                              now_ms=now_ms)
        self._lock = threading.Lock()
        self._snapshots: set[OffsetAndEpoch] = set()
        self._deferred: list[Callable[[], None]] = []
        self._recover_snapshots()
        self.truncate_to_latest_snapshot()

    def _recover_snapshots(self) -> None:
        start = self.log.log_start_offset
        for path in self.dir.iterdir():
            parsed = parse_snapshot_file_name(path.name)
            if parsed is None:
                continue
            snapshot_id, suffix = parsed
            if suffix in (PARTIAL_SUFFIX, DELETE_SUFFIX) or snapshot_id.offset < start:
                path.unlink(missing_ok=True)
            elif suffix == SUFFIX:
                self._snapshots.add(snapshot_id)
        if start > 0 and not any(s.offset >= start for s in self._snapshots):
            raise RaftLogError(f"{self.dir}: the log starts at {start} but no snapshot covers the "
                               f"records below it")

    # -- state -----------------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def latest_epoch(self) -> int | None:
        return self.log.latest_epoch()

    def epoch_end_offset(self, epoch: int) -> tuple[int, int] | None:
        found_epoch, end = self.log.end_offset_for_epoch(epoch)
        return None if found_epoch < 0 else (found_epoch, end)

    def size_in_bytes(self) -> int:
        return self.log.size_in_bytes()

    # -- reads and writes --------------------------------------------------------------------
    def read(self, start_offset: int, max_offset: int | None, max_bytes: int) -> bytes:
        info = self.log.read(start_offset, max_bytes, max_offset=max_offset, min_one_message=True)
        if info.empty:
            return b""
        return b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)

    def append_as_leader(self, batch: bytes | bytearray, epoch: int) -> LogAppendInfo:
        buf = bytearray(batch)
        _records.assign_offsets(buf, 0, self.log.log_end_offset, epoch)
        header = _records.read_batch_header(buf, 0)
        info = self.log.append_as_follower(buf, now_ms=header[8])
        return LogAppendInfo(info.first_offset, info.last_offset)

    def append_as_follower(self, data: bytes | memoryview) -> LogAppendInfo | None:
        view = memoryview(data).cast("B")
        entries, valid_end, error = _records.scan_batches(view, 0, -1, True)
        if error == "crc":
            raise RaftLogError(f"corrupt batch at byte {valid_end} of a Fetch response")
        first = None
        for position, base_offset, _, max_timestamp, size in entries:
            if base_offset != self.log.log_end_offset:
                raise RaftLogError(f"batch at {base_offset} does not start at the end {self.log.log_end_offset}")
            info = self.log.append_as_follower(view[position:position + size], now_ms=max_timestamp)
            if first is None:
                first = info.first_offset
        return None if first is None else LogAppendInfo(first, self.log.log_end_offset - 1)

    def truncate_to(self, offset: int) -> None:
        if offset < self.log.high_watermark:
            raise RaftLogError(f"truncation to {offset} is below the high watermark {self.log.high_watermark}")
        self.log.truncate_to(offset, now_ms=0)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset, now_ms=0)

    def update_high_watermark(self, offset: int) -> None:
        self.log.high_watermark = max(self.log.log_start_offset, min(offset, self.log.log_end_offset))

    def flush(self, offset: int) -> None:
        self.log.flush(offset)

    def take_deferred(self) -> list[Callable[[], None]]:
        deferred, self._deferred = self._deferred, []
        return deferred

    def close(self) -> None:
        """fsync and close (blocking)."""
        for work in self.take_deferred():
            work()
        self.log.flush()
        self.log.close()

    # -- snapshots -------------------------------------------------------------------------
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        with self._lock:
            return sorted(self._snapshots)

    def snapshot_path(self, snapshot_id: OffsetAndEpoch) -> Path:
        return self.dir / snapshot_file_name(snapshot_id)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> FileRawSnapshotReader | None:
        with self._lock:
            if snapshot_id not in self._snapshots:
                return None
        try:
            return FileRawSnapshotReader(self.snapshot_path(snapshot_id), snapshot_id)
        except FileNotFoundError:
            with self._lock:
                self._snapshots.discard(snapshot_id)
            return None

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int:
        try:
            return self.snapshot_path(snapshot_id).stat().st_size
        except FileNotFoundError:
            return 0

    def create_new_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        with self._lock:
            if snapshot_id in self._snapshots:
                return None
        return FileRawSnapshotWriter(self.dir, snapshot_id, self._on_snapshot_frozen)

    def _on_snapshot_frozen(self, snapshot_id: OffsetAndEpoch) -> None:
        with self._lock:
            self._snapshots.add(snapshot_id)

    def _forget_snapshots_before(self, snapshot_id: OffsetAndEpoch) -> None:
        with self._lock:
            doomed = [s for s in self._snapshots if s < snapshot_id]
            self._snapshots.difference_update(doomed)
        for s in doomed:
            path = self.snapshot_path(s)
            marked = path.with_name(path.name[:-len(SUFFIX)] + DELETE_SUFFIX)
            try:
                os.replace(path, marked)
            except FileNotFoundError:
                continue
            self._deferred.append(functools.partial(marked.unlink, missing_ok=True))

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        latest = self.latest_snapshot_id()
        with self._lock:
            known = snapshot_id in self._snapshots
        if latest is None or not known or not self.start_offset < snapshot_id.offset <= latest.offset \
                or snapshot_id.offset > self.log.high_watermark:
            return False
        doomed = self.log.delete_records_before(snapshot_id.offset)
        if doomed:
            self._deferred.append(lambda: self.log.delete_segment_files(doomed))
        self._forget_snapshots_before(snapshot_id)
        return True
