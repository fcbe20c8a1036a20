"""Copying a partition log into another log dir (the disk side of Kafka's future logs,
KIP-113 / ReplicaAlterLogDirsThread).

Layout: the copy is built in `<destination log dir>/<topic>-<partition>.<32 hex>-future/` with
the same files as the live log: `<base>.log/.index/.timeindex` per segment, producer-state
snapshots, `leader-epoch-checkpoint`, `aborted.txnindex` and `partition.metadata`. Kafka fills
its future log by fetching from the current one; pybroker copies files instead, which keeps
offsets, batch bytes, indexes and producer state byte-identical.

Protocol (driven by server/replica_log_dirs.py, swap by `LogManager.replace_current_with_future`):
1. the log is rolled once (event loop), so everything but a fresh, small active segment is sealed;
2. `sync_sealed` copies sealed segments (whole files, fsynced) in a worker thread, repeatedly
   while much was sealed meanwhile; a segment replaced by the cleaner, detached by retention or
   truncated is detected by identity and size, and its stale copy removed;
3. `finish` (event loop, no await until the swap) copies what is still missing: segments sealed
   since the last sync, the active segment's `.log` bytes (its indexes are rebuilt when the log
   is opened) and the small per-log files. No append can interleave, so nothing is lost or
   duplicated.

Concurrency: `sync_sealed` runs in one worker thread at a time and reads the segment list under
the log's `_lock`; files are copied by path, and a file renamed away meanwhile (cleaner swap,
retention) only makes that segment be copied again on the next pass. `finish` and `discard`
run on the event loop thread (discard's rmtree is for small or abandoned dirs).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from pybroker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile, fsync_dir
from pybroker.log.log import UnifiedLog, log_dir_name, parse_log_dir_name, write_partition_metadata
from pybroker.log.producer_state import SNAPSHOT_FILE_SUFFIX
from pybroker.log.segment import (
    INDEX_FILE_SUFFIX,
    LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
    LogSegment,
)
from pybroker.log.txn_index import TXN_INDEX_FILE

FUTURE_DIR_SUFFIX = "-future"
_COPY_CHUNK = 1 << 20


def future_dir_name(topic: str, partition: int) -> str:
    """Kafka's UnifiedLog.logFutureDirName: `<topic>-<partition>.<uuid hex>-future`."""
    return f"{log_dir_name(topic, partition)}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def parse_future_dir_name(name: str) -> tuple[str, int] | None:
    if not name.endswith(FUTURE_DIR_SUFFIX):
        return None
    base, _, suffix = name[: -len(FUTURE_DIR_SUFFIX)].rpartition(".")
    if not base or len(suffix) != 32:
        return None
    return parse_log_dir_name(base)


def _segment_files(dir: Path, base_offset: int) -> list[Path]:
    stem = f"{base_offset:020d}"
    return [dir / (stem + s) for s in (LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX)]


def _copy_file(src: Path, dst: Path, *, sync: bool) -> int:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        n = 0
        while chunk := fin.read(_COPY_CHUNK):
            fout.write(chunk)
            n += len(chunk)
        fout.flush()
        if sync:
            os.fsync(fout.fileno())
    return n


class FutureLogCopy:
    """The `-future` copy of one partition log being built in `log_dir`."""

    def __init__(self, log: UnifiedLog, log_dir: Path) -> None:
        self.log = log
        self.log_dir = Path(log_dir)
        self.dir = self.log_dir / future_dir_name(log.topic, log.partition)
        self.dir.mkdir()
        fsync_dir(self.log_dir)
        # base offset -> (segment object, size) of the sealed segments copied so far
        self._copied: dict[int, tuple[LogSegment, int]] = {}
        self.copied_bytes = 0

    def _sealed(self) -> list[LogSegment]:
        with self.log._lock:
            return list(self.log.segments[:-1])

    def _drop_stale(self, sealed: list[LogSegment]) -> None:
        current = {s.base_offset: s for s in sealed}
        for base, (segment, size) in list(self._copied.items()):
            live = current.get(base)
            if live is not segment or live.size != size:
                for path in _segment_files(self.dir, base):
                    path.unlink(missing_ok=True)
                del self._copied[base]
                self.copied_bytes -= size

    def copied_end_offset(self) -> int:
        """The offset up to which the copy holds the log (its log end offset, for describes)."""
        with self.log._lock:
            segments = list(self.log.segments)
        for segment in segments:
            c = self._copied.get(segment.base_offset)
            if c is None or c[0] is not segment:
                return segment.base_offset
        return self.log.log_end_offset

    def pending_bytes(self) -> int:
        """Bytes of sealed segments not yet copied (decides whether another pass is worth it)."""
        sealed = self._sealed()
        return sum(s.size for s in sealed
                   if (c := self._copied.get(s.base_offset)) is None or c[0] is not s or c[1] != s.size)

    def sync_sealed(self, *, sync: bool = True) -> int:
        """Copy every sealed segment not copied yet; returns the bytes copied. Worker thread (or
        the event loop for the few bytes left at `finish`, with sync=False)."""
        sealed = self._sealed()
        self._drop_stale(sealed)
        copied = 0
        for segment in sealed:
            if segment.base_offset in self._copied:
                continue
            size = segment.size
            try:
                pairs = zip(_segment_files(segment.dir, segment.base_offset),
                            _segment_files(self.dir, segment.base_offset), strict=True)
                for i, (src, dst) in enumerate(pairs):
                    if i and not src.exists() and segment.log_path.exists():
                        continue  # an index made on its first entry: this segment has none
                    _copy_file(src, dst, sync=sync)
            except FileNotFoundError:
                # renamed away by the cleaner or retention meanwhile: the next pass sees the change
                for path in _segment_files(self.dir, segment.base_offset):
                    path.unlink(missing_ok=True)
                continue
            if os.path.getsize(_segment_files(self.dir, segment.base_offset)[0]) != size:
                for path in _segment_files(self.dir, segment.base_offset):
                    path.unlink(missing_ok=True)
                continue
            self._copied[segment.base_offset] = (segment, size)
            self.copied_bytes += size
            copied += size
        if sync:
            fsync_dir(self.dir)
        return copied

    def finish(self) -> int:
        """Complete the copy: call on the event loop right before the swap, with no await in
        between, so the copy equals the live log. Returns the offset below which the copy is
        fsynced (the new log's recovery point). Raises OSError if a file cannot be copied."""
        log = self.log
        before = set(self._copied)
        self.sync_sealed(sync=False)
        unsynced = [base for base in self._copied if base not in before]
        sealed = self._sealed()
        if any((c := self._copied.get(s.base_offset)) is None or c[0] is not s for s in sealed):
            raise OSError(f"{log}: a sealed segment changed while the move was finishing")
        active = log.active_segment
        for path in _segment_files(self.dir, active.base_offset):
            path.unlink(missing_ok=True)
        with open(self.dir / f"{active.base_offset:020d}{LOG_FILE_SUFFIX}", "wb") as fout:
            remaining, position = active.size, 0
            while remaining > 0:
                chunk = os.pread(active.fd, min(remaining, _COPY_CHUNK), position)
                if not chunk:
                    raise OSError(f"{active}: short read while copying")
                fout.write(chunk)
                position += len(chunk)
                remaining -= len(chunk)
        for path in self.dir.iterdir():
            if path.name.endswith(SNAPSHOT_FILE_SUFFIX):
                path.unlink()
        for path in log.dir.iterdir():
            if path.name == TXN_INDEX_FILE or path.name.endswith(SNAPSHOT_FILE_SUFFIX):
                _copy_file(path, self.dir / path.name, sync=False)
        # the two small checkpoints may be behind memory (their writes are deferred): write the
        # live state rather than copy the files
        LeaderEpochCheckpointFile(self.dir / LEADER_EPOCH_CHECKPOINT).write(log.leader_epoch_cache.entries(),
                                                                           sync=False)
        if log.topic_id is not None:
            write_partition_metadata(self.dir, log.topic_id, sync=False)
        return min([active.base_offset, *unsynced])

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
