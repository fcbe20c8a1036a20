"""The log Raft replicates, with its snapshots (Kafka's ReplicatedLog).

Two implementations: `MemoryLog` (memory_log.py; the simulation's, able to lose what was not
flushed when its node crashes) and `KafkaMetadataLog` (kafka_metadata_log.py; the
`__cluster_metadata-0` partition directory on disk). Both store record batches v2 whose
partitionLeaderEpoch is the epoch of the leader that wrote them, and both keep Kafka's leader
epoch cache (epoch -> start offset), which `end_offset_for_epoch` answers from.

Rules shared by both, here:

- `validate_offset_and_epoch(offset, epoch)`: the leader's check of a follower's Fetch. Below
  the log start (or at it with another epoch, or at an epoch older than the oldest snapshot)
  -> SNAPSHOT (the latest one); else if the follower's epoch ends earlier here, or not at all
  -> DIVERGING (truncate to what this log has for that epoch); else VALID.
- `truncate_to_end_offset(diverging)`: how far a follower truncates on a DivergingEpoch.
- `last_fetched_epoch`: the epoch of the last batch, or of the snapshot when the log is empty.

Offsets: start_offset <= readable offsets < end_offset (the LEO). Appends and truncation only
touch the page cache (or memory) and run on the Raft client's thread; `flush` makes a prefix
durable and blocks, so the driver runs it in a worker thread while the client waits.
"""

from __future__ import annotations

from typing import NamedTuple

from pybroker.raft.offset_and_epoch import OffsetAndEpoch, ValidOffsetAndEpoch
from pybroker.raft.snapshots import RawSnapshotReader, RawSnapshotWriter


class LogAppendInfo(NamedTuple):
    first_offset: int
    last_offset: int


class RaftLogError(Exception):
    """A request the log cannot honour (Kafka's IllegalArgumentException / KafkaException)."""


class ReplicatedLog:
    # -- state (implemented by subclasses) ---------------------------------------------------
    @property
    def start_offset(self) -> int:
        raise NotImplementedError

    @property
    def end_offset(self) -> int:
        raise NotImplementedError

    @property
    def high_watermark(self) -> int:
        raise NotImplementedError

    def latest_epoch(self) -> int | None:
        """Epoch of the last batch in the log (None when the log holds no batch)."""
        raise NotImplementedError

    def epoch_end_offset(self, epoch: int) -> tuple[int, int] | None:
        """The leader epoch cache's (epoch, end offset) for `epoch`, None when undefined."""
        raise NotImplementedError

    def read(self, start_offset: int, max_offset: int | None, max_bytes: int) -> bytes:
        """Whole batches from `start_offset` (a batch boundary) below `max_offset`; at least one
        batch even past `max_bytes`. Empty at or past the end."""
        raise NotImplementedError

    def append_as_leader(self, batch: bytes | bytearray, epoch: int) -> LogAppendInfo:
        """Append one batch built at base offset 0: offsets and the epoch are assigned here."""
        raise NotImplementedError

    def append_as_follower(self, data: bytes | memoryview) -> LogAppendInfo | None:
        """Append the complete batches of a Fetch response (their first at the LEO); CRCs are
        checked; a trailing partial batch is ignored. None when nothing was complete."""
        raise NotImplementedError

    def truncate_to(self, offset: int) -> None:
        raise NotImplementedError

    def truncate_fully_and_start_at(self, offset: int) -> None:
        raise NotImplementedError

    def update_high_watermark(self, offset: int) -> None:
        raise NotImplementedError

    def flush(self, offset: int) -> None:
        raise NotImplementedError

    # snapshots
    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        raise NotImplementedError

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotReader | None:
        raise NotImplementedError

    def create_new_snapshot_unchecked(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        raise NotImplementedError

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        raise NotImplementedError

    def size_in_bytes(self) -> int:
        raise NotImplementedError

    def snapshot_size(self, snapshot_id: OffsetAndEpoch) -> int:
        raise NotImplementedError

    # -- shared rules ----------------------------------------------------------------------
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        ids = self.snapshot_ids()
        return ids[-1] if ids else None

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        ids = self.snapshot_ids()
        return ids[0] if ids else None

    def latest_snapshot(self) -> RawSnapshotReader | None:
        latest = self.latest_snapshot_id()
        return None if latest is None else self.read_snapshot(latest)

    def last_fetched_epoch(self) -> int:
        epoch = self.latest_epoch()
        if epoch is not None:
            return epoch
        snapshot = self.latest_snapshot_id()
        if snapshot is None:
            return 0
        if snapshot.offset != self.start_offset or snapshot.offset != self.end_offset:
            raise RaftLogError(f"log has no epoch but a snapshot {snapshot}; expected it at the log "
                               f"start {self.start_offset} and end {self.end_offset}")
        return snapshot.epoch

    def end_offset_and_epoch(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.end_offset, self.last_fetched_epoch())

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        found = self.epoch_end_offset(epoch)
        earliest = self.earliest_snapshot_id()
        if found is not None and earliest is not None and found[1] == earliest.offset and found[0] == epoch:
            # the epoch is older than the log's: the oldest snapshot ends where it diverges
            return earliest
        if found is not None:
            return OffsetAndEpoch(found[1], found[0])
        return OffsetAndEpoch(self.end_offset, self.last_fetched_epoch())

    def validate_offset_and_epoch(self, offset: int, epoch: int) -> ValidOffsetAndEpoch:
        if self.start_offset == 0 and offset == 0:
            return ValidOffsetAndEpoch.valid(OffsetAndEpoch(0, 0))
        earliest = self.earliest_snapshot_id()
        if earliest is not None and (offset < self.start_offset
                                     or (offset == self.start_offset and epoch != earliest.epoch)
                                     or epoch < earliest.epoch):
            latest = self.latest_snapshot_id()
            assert latest is not None
            return ValidOffsetAndEpoch.snapshot(latest)
        end = self.end_offset_for_epoch(epoch)
        if end.epoch != epoch or end.offset < offset:
            return ValidOffsetAndEpoch.diverging(end)
        return ValidOffsetAndEpoch.valid(OffsetAndEpoch(offset, epoch))

    def truncate_to_end_offset(self, end: OffsetAndEpoch) -> int:
        """Truncate after a DivergingEpoch; returns the new end offset."""
        if end.epoch == 0:
            offset = min(end.offset, self.end_offset)
        else:
            local = self.end_offset_for_epoch(end.epoch)
            offset = min(local.offset, end.offset) if local.epoch == end.epoch else local.offset
        self.truncate_to(offset)
        return offset

    def truncate_to_latest_snapshot(self) -> bool:
        """When the latest snapshot is ahead of the log, empty the log and start it there."""
        latest = self.latest_snapshot_id()
        log_epoch = self.latest_epoch() or 0
        if latest is not None and (latest.epoch > log_epoch
                                   or (latest.epoch == log_epoch and latest.offset > self.end_offset)):
            self.truncate_fully_and_start_at(latest.offset)
            self._forget_snapshots_before(latest)
            return True
        return False

    def _forget_snapshots_before(self, snapshot_id: OffsetAndEpoch) -> None:
        raise NotImplementedError

    retention_bytes: int = -1
    retention_ms: int = -1

    def snapshot_timestamp(self, snapshot_id: OffsetAndEpoch) -> int | None:
        """lastContainedLogTimestamp of a snapshot's header."""
        from pybroker.raft.snapshots import SnapshotReader

        raw = self.read_snapshot(snapshot_id)
        if raw is None:
            return None
        try:
            return SnapshotReader(raw).last_contained_log_timestamp
        except ValueError:
            return None
        finally:
            raw.close()

    def maybe_clean(self, now_ms: int) -> bool:
        """Kafka's KafkaMetadataLog.maybeClean: while more than one snapshot exists and the log
        plus snapshots exceed metadata.max.retention.bytes, or the oldest snapshot is older than
        metadata.max.retention.ms, delete the oldest snapshot and move the log start to the
        next one (`delete_before_snapshot`). The latest snapshot always stays."""
        cleaned = False
        if self.retention_bytes >= 0:
            ids = self.snapshot_ids()
            snapshots_total = sum(self.snapshot_size(s) for s in ids)
            for older, newer in zip(ids, ids[1:], strict=False):
                if self.size_in_bytes() + snapshots_total <= self.retention_bytes:
                    break
                size = self.snapshot_size(older)
                if not self.delete_before_snapshot(newer):
                    break
                snapshots_total -= size
                cleaned = True
        if self.retention_ms >= 0:
            ids = self.snapshot_ids()
            for older, newer in zip(ids, ids[1:], strict=False):
                timestamp = self.snapshot_timestamp(older)
                if timestamp is None or now_ms - timestamp <= self.retention_ms:
                    break
                if not self.delete_before_snapshot(newer):
                    break
                cleaned = True
        return cleaned

    def create_new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        """A writer for a snapshot of the committed prefix ending at `snapshot_id`; None when it
        exists already or lies below the log start. Raises RaftLogError past the high
        watermark or when `snapshot_id` does not name a record of this log."""
        if snapshot_id.offset < self.start_offset:
            return None
        if snapshot_id.offset > self.high_watermark:
            raise RaftLogError(f"snapshot id {snapshot_id} is past the high watermark {self.high_watermark}")
        verdict = self.validate_offset_and_epoch(snapshot_id.offset, snapshot_id.epoch)
        if verdict.kind.name != "VALID":
            raise RaftLogError(f"snapshot id {snapshot_id} is not valid for the log: {verdict}")
        return self.create_new_snapshot_unchecked(snapshot_id)
