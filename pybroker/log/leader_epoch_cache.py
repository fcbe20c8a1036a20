"""Leader epoch -> start offset history of one partition (Kafka's LeaderEpochFileCache).

Each entry says "epoch E began at offset S"; entries are strictly increasing in both fields.
Persisted to `<partition dir>/leader-epoch-checkpoint` (version 0, "epoch startOffset" lines)
on every change. `assign()` writes synchronously (rare: once per new leader epoch);
truncations write too, since pybroker has no separate scheduler for this file.

OffsetForLeaderEpoch semantics (`end_offset_for`):
- requested epoch -1 (UNDEFINED) or above every known epoch -> (-1, -1);
- the latest epoch -> (latest, log_end_offset);
- below the first known epoch -> (requested, start offset of the first epoch);
- otherwise (largest epoch <= requested, start offset of the next epoch).
Example: entries (0, 0) (2, 150) (5, 400), LEO 520: epoch 5 -> (5, 520); 3 -> (2, 400);
2 -> (2, 400); 1 -> (0, 150); 7 -> (-1, -1).

Concurrency: owned by the partition's append path; not thread-safe.
"""

from __future__ import annotations

import bisect
import os
from pathlib import Path

from pybroker.log.checkpoint import LEADER_EPOCH_CHECKPOINT, LeaderEpochCheckpointFile

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    def __init__(self, dir: str | os.PathLike[str] | None, *, sync: bool = True) -> None:
        """Load from `<dir>/leader-epoch-checkpoint`; dir None keeps the cache in memory only."""
        self._checkpoint = LeaderEpochCheckpointFile(Path(dir) / LEADER_EPOCH_CHECKPOINT) if dir else None
        self._sync = sync
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
        """Record that `epoch` starts at `start_offset`; True (and checkpointed) if it changed."""
        if self._assign(epoch, start_offset):
            self._flush()
            return True
        return False

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
        while self._starts and self._starts[-1] >= end_offset:
            self._epochs.pop()
            self._starts.pop()
        self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below start_offset; the epoch holding it now starts there."""
        i = bisect.bisect_right(self._starts, start_offset)
        if i == 0:
            return
        keep_epoch = self._epochs[i - 1]
        del self._epochs[:i]
        del self._starts[:i]
        self._epochs.insert(0, keep_epoch)
        self._starts.insert(0, start_offset)
        self._flush()

    def clear(self) -> None:
        self._epochs.clear()
        self._starts.clear()
        self._flush()

    def _flush(self) -> None:
        if self._checkpoint is not None and self._checkpoint.path.parent.is_dir():
            self._checkpoint.write(self.entries(), sync=self._sync)
