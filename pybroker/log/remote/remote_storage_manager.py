"""The RemoteStorageManager seam (Kafka's org.apache.kafka.server.log.remote.storage
RemoteStorageManager, LogSegmentData, IndexType and the RemoteStorageException family).

An RSM stores a rolled segment's bytes and indexes in an object store and reads them back.
Its calls block (network I/O): the remote log manager calls them in worker threads, never on
the event loop, and an implementation must be safe to call from several threads at once.

- `copy_log_segment_data(metadata, data)`: upload everything in `data` under the segment id of
  `metadata` (a new id per attempt, so a retried copy never overwrites a finished one); returns
  optional custom metadata (bytes kept in the segment's metadata record) or None.
- `fetch_log_segment(metadata, start_position, end_position=None)`: the segment's bytes from
  `start_position` to `end_position` inclusive (None: to the end), Kafka's fetchLogSegment.
- `fetch_index(metadata, index_type)`: one index's whole bytes. A TRANSACTION index the copy did
  not have raises RemoteResourceNotFoundError.
- `delete_log_segment_data(metadata)`: remove all of it; deleting what is already gone is not
  an error (Kafka: the call must be idempotent).
- `close()`.

Errors: RemoteStorageError for anything the store failed (the caller retries: a copy is
retried on the next task run, a read answers the client's fetch with an error);
RemoteResourceNotFoundError when an object does not exist.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pybroker.log.remote.remote_log_segment_metadata import RemoteLogSegmentMetadata


class IndexType(enum.Enum):
    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    PRODUCER_SNAPSHOT = "producer_snapshot"
    TRANSACTION = "transaction"
    LEADER_EPOCH = "leader_epoch"


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """What one copy uploads (Kafka's LogSegmentData): the segment's files, its producer-state
    snapshot and the leader-epoch checkpoint's bytes as of the segment's end. `log_segment` is
    read up to `log_segment_size` bytes only: the file of an inactive segment may carry
    preallocated space after its data."""

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes
    log_segment_size: int


class RemoteStorageError(Exception):
    """Kafka's RemoteStorageException: the store failed; retriable by the caller."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """Kafka's RemoteResourceNotFoundException: the object is not in the store."""


class RemoteStorageManager(Protocol):
    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None: ...

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes: ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes: ...

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None: ...

    def close(self) -> None: ...


__all__ = ["IndexType", "LogSegmentData", "RemoteResourceNotFoundError", "RemoteStorageError",
           "RemoteStorageManager"]
