"""When the state machine should write a metadata snapshot (the triggers of Kafka's
SnapshotGenerator).

    metadata.log.max.record.bytes.between.snapshots  20971520  snapshot once this many bytes of
                                                                records committed since the last
    metadata.log.max.snapshot.interval.ms            3600000   ... or once this long passed since
                                                                the last, if anything committed
                                                                (0 disables the time trigger)

The state machine feeds `record_committed_bytes` from its handle_commit, asks `should_snapshot`
(a reason string, or None) after applying, writes the snapshot at the end of the last batch it
applied (`KafkaRaftClient.create_snapshot`) and calls `snapshot_done`. While a snapshot is
being written (`snapshot_started` .. `snapshot_done`) no new one is suggested.

Concurrency: the state machine's thread; no clock is read (`now_ms` is passed in).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybroker.raft.quorum_config import PropertySource

MAX_BYTES_BETWEEN_SNAPSHOTS = "metadata.log.max.record.bytes.between.snapshots"
MAX_SNAPSHOT_INTERVAL_MS = "metadata.log.max.snapshot.interval.ms"
DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS = 20 * 1024 * 1024
DEFAULT_MAX_SNAPSHOT_INTERVAL_MS = 3_600_000


class SnapshotPolicy:
    def __init__(self, *, max_bytes_between_snapshots: int = DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS,
                 max_interval_ms: int = DEFAULT_MAX_SNAPSHOT_INTERVAL_MS, now_ms: int = 0) -> None:
        if max_bytes_between_snapshots < 1:
            raise ValueError(f"{MAX_BYTES_BETWEEN_SNAPSHOTS} must be at least 1")
        if max_interval_ms < 0:
            raise ValueError(f"{MAX_SNAPSHOT_INTERVAL_MS} must not be negative")
        self.max_bytes = max_bytes_between_snapshots
        self.max_interval_ms = max_interval_ms
        self.bytes_since_last_snapshot = 0
        self.last_snapshot_ms = now_ms
        self.in_progress = False

    @classmethod
    def from_properties(cls, props: PropertySource | Mapping[str, Any], now_ms: int = 0) -> SnapshotPolicy:
        return cls(max_bytes_between_snapshots=int(props.get(MAX_BYTES_BETWEEN_SNAPSHOTS,
                                                             DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS)),
                   max_interval_ms=int(props.get(MAX_SNAPSHOT_INTERVAL_MS, DEFAULT_MAX_SNAPSHOT_INTERVAL_MS)),
                   now_ms=now_ms)

    def record_committed_bytes(self, size: int) -> None:
        self.bytes_since_last_snapshot += size

    def should_snapshot(self, now_ms: int) -> str | None:
        if self.in_progress or self.bytes_since_last_snapshot == 0:
            return None
        if self.bytes_since_last_snapshot >= self.max_bytes:
            return f"{self.bytes_since_last_snapshot} bytes committed since the last snapshot"
        if self.max_interval_ms and now_ms - self.last_snapshot_ms >= self.max_interval_ms:
            return f"{now_ms - self.last_snapshot_ms} ms since the last snapshot"
        return None

    def snapshot_started(self) -> None:
        self.in_progress = True

    def snapshot_done(self, now_ms: int) -> None:
        self.in_progress = False
        self.bytes_since_last_snapshot = 0
        self.last_snapshot_ms = now_ms
