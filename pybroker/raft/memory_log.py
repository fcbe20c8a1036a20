"""An in-memory ReplicatedLog for tests and the simulation, which can forget what was never
flushed (a crash with data loss).

Batches are stored as their v2 bytes with their offsets and epoch, so the Raft client serves
and appends exactly what it would with the file log. `flush(offset)` records a *durable image*
(batches, log start, epoch cache); `crash(lose_unflushed=True)` restores that image, as a
power cut would: unflushed appends vanish and unflushed truncations come back. A frozen
snapshot is durable at once (freeze fsyncs). `crash(lose_unflushed=False)` models a process
crash: the page cache survives, nothing is lost, and what survived counts as durable (the
kernel writes it back).

Log cleanup follows Kafka's KafkaMetadataLog.maybeClean: with more than one snapshot, the
oldest snapshots are deleted while the log plus snapshots exceed `retention_bytes` (or are older
than `retention_ms`), and the log start moves to the next snapshot, dropping the batches below.

Concurrency: single-threaded (the simulation calls everything from one thread).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from pybroker._native import records as _records
from pybroker.log.leader_epoch_cache import LeaderEpochFileCache
from pybroker.raft.offset_and_epoch import OffsetAndEpoch
from pybroker.raft.raft_log import LogAppendInfo, RaftLogError, ReplicatedLog
from pybroker.raft.snapshots import (
    MemoryRawSnapshotReader,
    MemoryRawSnapshotWriter,
    RawSnapshotWriter,
)
from pybroker.records.batch import BatchHeader


@dataclass(frozen=True, slots=True)
class _Entry:
    base_offset: int
    last_offset: int
    epoch: int
    max_timestamp: int
    data: bytes


class MemoryLog(ReplicatedLog):
    def __init__(self, *, retention_bytes: int = -1, retention_ms: int = -1) -> None:
        self.retention_bytes = retention_bytes
        self.retention_ms = retention_ms
        self._entries: list[_Entry] = []
        self._bases: list[int] = []
        self._start = 0
        self._end = 0
        self._hw = 0
        self._cache = LeaderEpochFileCache(None)
        self._snapshots: dict[OffsetAndEpoch, bytes] = {}
        self._durable: tuple[tuple[_Entry, ...], int, list[tuple[int, int]]] = ((), 0, [])
        self.flushed_offset = 0

    # -- state -----------------------------------------------------------------------------
    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def high_watermark(self) -> int:
        return self._hw

    def latest_epoch(self) -> int | None:
        return self._cache.latest_epoch()

    def epoch_end_offset(self, epoch: int) -> tuple[int, int] | None:
        found_epoch, end = self._cache.end_offset_for(epoch, self._end)
        return None if found_epoch < 0 else (found_epoch, end)

    def size_in_bytes(self) -> int:
        return sum(len(e.data) for e in self._entries)

    def batches(self) -> list[tuple[int, int, int]]:
        """(base offset, last offset, epoch) of every batch, for invariant checks."""
        return [(e.base_offset, e.last_offset, e.epoch) for e in self._entries]

    def batch_bytes(self, base_offset: int) -> bytes:
        return self._entries[self._bases.index(base_offset)].data

    # -- reads and writes --------------------------------------------------------------------
    def read(self, start_offset: int, max_offset: int | None, max_bytes: int) -> bytes:
        if start_offset < self._start or start_offset > self._end:
            raise RaftLogError(f"offset {start_offset} out of range [{self._start}, {self._end}]")
        upper = self._end if max_offset is None else min(max_offset, self._end)
        i = bisect.bisect_right(self._bases, start_offset) - 1
        if i < 0:
            i = 0
        out = bytearray()
        while i < len(self._entries):
            entry = self._entries[i]
            if entry.last_offset >= upper:
                break
            if out and len(out) + len(entry.data) > max_bytes:
                break
            if entry.last_offset >= start_offset:
                out += entry.data
            i += 1
        return bytes(out)

    def _append(self, data: bytes, header: BatchHeader) -> None:
        if header.base_offset != self._end:
            raise RaftLogError(f"batch at {header.base_offset} does not start at the end {self._end}")
        last = header.base_offset + header.last_offset_delta
        self._entries.append(_Entry(header.base_offset, last, header.partition_leader_epoch,
                                    header.max_timestamp, data))
        self._bases.append(header.base_offset)
        latest = self._cache.latest_epoch()
        if header.partition_leader_epoch >= 0 and (latest is None or header.partition_leader_epoch > latest):
            self._cache.assign(header.partition_leader_epoch, header.base_offset)
        self._end = last + 1

    def append_as_leader(self, batch: bytes | bytearray, epoch: int) -> LogAppendInfo:
        buf = bytearray(batch)
        _records.assign_offsets(buf, 0, self._end, epoch)
        header = BatchHeader._make(_records.read_batch_header(buf))
        first = self._end
        self._append(bytes(buf), header)
        return LogAppendInfo(first, self._end - 1)

    def append_as_follower(self, data: bytes | memoryview) -> LogAppendInfo | None:
        view = memoryview(data)
        entries, valid_end, error = _records.scan_batches(view, 0, -1, True)
        if error == "crc":
            raise RaftLogError(f"corrupt batch at byte {valid_end} of a Fetch response")
        first = None
        for position, _, _, _, size in entries:
            chunk = bytes(view[position:position + size])
            header = BatchHeader._make(_records.read_batch_header(chunk))
            if first is None:
                first = header.base_offset
            self._append(chunk, header)
        return None if first is None else LogAppendInfo(first, self._end - 1)

    def truncate_to(self, offset: int) -> None:
        if offset < self._hw:
            raise RaftLogError(f"truncation to {offset} is below the high watermark {self._hw}")
        if offset >= self._end:
            return
        i = bisect.bisect_left(self._bases, offset)
        # a batch holding `offset` goes whole, as a segment truncation drops whole batches
        if i > 0 and self._entries[i - 1].last_offset >= offset:
            i -= 1
        del self._entries[i:]
        del self._bases[i:]
        self._end = self._entries[-1].last_offset + 1 if self._entries else self._start
        self._cache.truncate_from_end(self._end)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._entries.clear()
        self._bases.clear()
        self._start = self._end = offset
        self._hw = max(self._hw, offset)
        self._cache.clear()

    def update_high_watermark(self, offset: int) -> None:
        self._hw = min(offset, self._end)

    def flush(self, offset: int) -> None:
        self._durable = (tuple(self._entries), self._start, self._cache.entries())
        self.flushed_offset = self._end

    def crash(self, lose_unflushed: bool) -> None:
        """What survives a crash: everything (process crash) or the durable image (power cut).
        Then Kafka's start-up checks run: snapshots below the log start go and a snapshot
        ahead of the log replaces it."""
        if lose_unflushed:
            entries, start, cache = self._durable
            self._entries = list(entries)
            self._bases = [e.base_offset for e in entries]
            self._start = start
            self._end = entries[-1].last_offset + 1 if entries else start
            self._cache = LeaderEpochFileCache(None)
            for epoch, epoch_start in cache:
                if epoch_start < self._end or not entries:
                    self._cache.assign(epoch, epoch_start)
            self._cache.truncate_from_end(self._end)
        else:
            self.flush(self._end)
        self._hw = self._start
        for snapshot_id in [s for s in self._snapshots if s.offset < self._start]:
            del self._snapshots[snapshot_id]
        self.truncate_to_latest_snapshot()

    # -- snapshots -------------------------------------------------------------------------
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self._snapshots)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> MemoryRawSnapshotReader | None:
        data = self._snapshots.get(snapshot_id)
        return None if data is None else MemoryRawSnapshotReader(snapshot_id, data)

    def create_new_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        if snapshot_id in self._snapshots:
            return None
        return MemoryRawSnapshotWriter(snapshot_id, self._on_snapshot_frozen)

    def _on_snapshot_frozen(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        self._snapshots[snapshot_id] = data

    def _forget_snapshots_before(self, snapshot_id: OffsetAndEpoch) -> None:
        for s in [s for s in self._snapshots if s < snapshot_id]:
            del self._snapshots[s]

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        latest = self.latest_snapshot_id()
        if latest is None or snapshot_id not in self._snapshots or not self._start < snapshot_id.offset \
                or snapshot_id.offset > latest.offset or snapshot_id.offset > self._hw:
            return False
        self._start = snapshot_id.offset
        # whole batches below the new start go (Kafka deletes whole segments; a batch is this
        # log's segment)
        keep = bisect.bisect_right(self._bases, snapshot_id.offset) - 1
        if keep > 0:
            del self._entries[:keep]
            del self._bases[:keep]
        if self._entries and self._entries[0].last_offset < snapshot_id.offset:
            del self._entries[0]
            del self._bases[0]
        self._cache.truncate_from_start(snapshot_id.offset)
        self._forget_snapshots_before(snapshot_id)
        return True

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int:
        return len(self._snapshots.get(snapshot_id, b""))
