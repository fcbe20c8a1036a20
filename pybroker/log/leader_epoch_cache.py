"""Leader epoch -> start offset history of one partition (Kafka's LeaderEpochFileCache).

Each entry says "epoch E began at offset S"; entries are strictly increasing in both fields.
Persisted to `<partition dir>/leader-epoch-checkpoint` (version 0, "epoch startOffset" lines),
always written whole to a temporary file, fsynced and renamed over the old one, so the file on
disk is always a complete checkpoint of some past state.

When it is written (a deliberate difference from Kafka, which fsyncs on `assign` and flushes
truncations asynchronously, KAFKA-15046): every change only marks the cache dirty (and tells
`on_dirty`, so the log manager's background flusher writes it soon, as Kafka's scheduler does
for truncations); `flush()` writes it. The partition log calls `flush()` before it moves its
recovery point (UnifiedLog.flush) and when it closes. That keeps the guarantee Kafka's
synchronous assign exists for: every entry for data below the recovery point is on disk, since
recovery only rebuilds entries from the batches above it (and truncates stale ones, which is
why Kafka can flush truncations late). What it saves is an fsync on the event loop whenever an
append starts a new epoch, and two fsyncs per partition when thousands are created at once.

OffsetForLeaderEpoch semantics (`end_offset_for`):
- requested epoch -1 (UNDEFINED) or above every known epoch -> (-1, -1);
- the latest epoch -> (latest, log_end_offset);
- below the first known epoch -> (requested, start offset of the first epoch);
- otherwise (largest epoch <= requested, start offset of the next epoch).
Example: entries (0, 0) (2, 150) (5, 400), LEO 520: epoch 5 -> (5, 520); 3 -> (2, 400);
2 -> (2, 400); 1 -> (0, 150); 7 -> (-1, -1).

Concurrency: changed by the partition's append path (or its loading thread); `flush()` may run
in any worker thread. `_lock` makes a change and the snapshot a flush writes atomic, and
`_write_lock` orders flushes so a later state is never overwritten by an earlier one.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Callable
from pathlib import Path

from pybroker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    def __init__(self, dir: str | os.PathLike[str] | None, *, sync: bool = True,
                 on_dirty: Callable[[], None] | None = None) -> None:
        """Load from `<dir>/leader-epoch-checkpoint`; dir None keeps the cache in memory only.
        `on_dirty` is called (on the changing thread) when a clean cache gets a change."""
        self._checkpoint = LeaderEpochCheckpointFile(Path(dir) / LEADER_EPOCH_CHECKPOINT) if dir else None
        self._sync = sync
        self.on_dirty = on_dirty
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._dirty = False
        self._epochs: list[int] = []
        self._starts: list[int] = []
        if self._checkpoint is not None:
            for epoch, start in self._checkpoint.read():
                self._assign(epoch, start)

    # -- queries ---------------------------------------------------------------------------
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def latest_epoch(self) -> int | None:
        return self._epochs[-1] if self._epochs else None

    def earliest_entry(self) -> tuple[int, int] | None:
        return (self._epochs[0], self._starts[0]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Kafka's epochForOffset: the epoch whose range holds `offset` (the latest one starting
        at or below it), None below the first entry."""
        i = bisect.bisect_right(self._starts, offset)
        return self._epochs[i - 1] if i else None

    def epochs_between(self, start_offset: int, end_offset: int) -> list[tuple[int, int]]:
        """(epoch, first offset in [start_offset, end_offset]) of every epoch with offsets in that
        range, ascending (the segment_leader_epochs of a remote segment, Kafka's
        RemoteLogManager.getLeaderEpochEntries)."""
        out: list[tuple[int, int]] = []
        for i, (epoch, start) in enumerate(zip(self._epochs, self._starts, strict=True)):
            nxt = self._starts[i + 1] if i + 1 < len(self._starts) else None
            if start > end_offset:
                break
            if nxt is not None and nxt <= start_offset:
                continue
            out.append((epoch, max(start, start_offset)))
        return out

    @property
    def dirty(self) -> bool:
        """Whether the checkpoint file is behind the cache."""
        return self._dirty

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    # -- updates ---------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; True (and dirty) if it changed."""
        with self._lock:
            changed = self._assign(epoch, start_offset)
        if changed:
            self._mark_dirty()
        return changed

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        # Drop entries that would break monotonicity with the new one (Kafka's
        # maybeTruncateNonMonotonicEntries).
        while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
            self._epochs.pop()
            self._starts.pop()
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries whose start offset >= end_offset (log truncated to end_offset)."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return
        with self._lock:
            while self._starts and self._starts[-1] >= end_offset:
                self._epochs.pop()
                self._starts.pop()
        self._mark_dirty()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below start_offset; the epoch holding it now starts there."""
        i = bisect.bisect_right(self._starts, start_offset)
        if i == 0 or (i == 1 and self._starts[0] == start_offset):
            return  # nothing below it (the first epoch already starts exactly there)
        with self._lock:
            keep_epoch = self._epochs[i - 1]
            del self._epochs[:i]
            del self._starts[:i]
            self._epochs.insert(0, keep_epoch)
            self._starts.insert(0, start_offset)
        self._mark_dirty()

    def clear(self) -> None:
        if not self._epochs:
            return
        with self._lock:
            self._epochs.clear()
            self._starts.clear()
        self._mark_dirty()

    def mark_dirty(self) -> None:
        """The file on disk may not match (or not be durable): write it at the next flush."""
        self._mark_dirty()

    def _mark_dirty(self) -> None:
        if self._checkpoint is None:
            return
        was_dirty, self._dirty = self._dirty, True
        if not was_dirty and self.on_dirty is not None:
            self.on_dirty()

    # -- persistence -----------------------------------------------------------------------
    def flush(self, *, sync_dir: bool = True) -> bool:
        """Write the checkpoint if it is behind (tmp file, fsync, rename, fsync of the dir unless
        the caller does it); True if it wrote. A dir renamed away meanwhile (the log was deleted)
        writes nothing."""
        if self._checkpoint is None or not self._dirty:
            return False
        with self._write_lock:
            with self._lock:
                if not self._dirty:
                    return False
                self._dirty = False
                entries = self.entries()
            try:
                self._checkpoint.write(entries, sync=self._sync, sync_dir=sync_dir)
            except FileNotFoundError:
                if self._checkpoint.path.parent.is_dir():
                    self._dirty = True
                    raise
                return False  # Kafka's writeIfDirExists: the partition dir is gone
            except BaseException:
                self._dirty = True
                raise
        return True
