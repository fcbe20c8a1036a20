"""A log whose early segments are copied to a remote storage manager and then deleted locally,
as the remote log manager's copy and local retention leave it: what the remote read path is
tested on (tests/unit/remote/test_remote_log_reader.py).

`TieredLog.copy_and_drop(n)` copies the first `n` rolled segments (log, offset and time
indexes, the segment's transaction index entries in Kafka's .txnindex layout, producer snapshot,
leader-epoch checkpoint) through the RSM, records them COPY_SEGMENT_FINISHED in a
RemotePartitionMetadataStore (trlmm's cache) behind a RemoteLogMetadataManager facade (MemoryRlmm), then
drops them locally. The original bytes of every copied segment are kept to compare reads with.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path

from pybroker.log.config import LogConfig
from pybroker.log.log import UnifiedLog
from pybroker.log.producer_state import snapshot_file
from pybroker.log.remote.remote_log_metadata_cache import RemotePartitionMetadataStore
from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)
from pybroker.log.remote.remote_storage_manager import (
    IndexType,
    LogSegmentData,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
)
from pybroker.log.remote.storage import create_remote_storage_manager

TOPIC_ID = uuid.UUID("6f1d2c3b-4a59-4e8f-9a0b-1c2d3e4f5a6b").bytes
TP = TopicIdPartition(TOPIC_ID, "t", 0)
_TXN = struct.Struct(">hqqqq")


class MemoryRlmm:
    """The RemoteLogMetadataManager protocol over trlmm's RemotePartitionMetadataStore, fed
    directly (no metadata topic): what a broker's topic-based manager serves after consuming.
    Every write is applied at once and kept in `events`; `stopped` lists the partitions
    on_stop_partitions was given. A partition is ready once a leadership change named it (as the
    topic-based manager's), or at its first write with `ready_on_write` (a reader's tests, which
    never change leadership)."""

    def __init__(self, ready_on_write: bool = False) -> None:
        self.store = RemotePartitionMetadataStore()
        self.ready_on_write = ready_on_write
        self.events: list[object] = []
        self.stopped: list[TopicIdPartition] = []

    def _write(self, event: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate | RemotePartitionDeleteMetadata,
               tp: TopicIdPartition) -> None:
        if self.ready_on_write:
            self.store.maybe_load_partition(tp)
            self.store.mark_initialized(tp)
        self.events.append(event)
        self.store.handle(event)

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._write(metadata, metadata.topic_id_partition)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._write(update, update.remote_log_segment_id.topic_id_partition)

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None:
        self._write(metadata, metadata.topic_id_partition)

    def remote_log_segment_metadata(self, tp: TopicIdPartition, epoch_for_offset: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        return self.store.remote_log_segment_metadata(tp, offset, epoch_for_offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        return self.store.highest_log_offset(tp, leader_epoch)

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        return iter(self.store.list_remote_log_segments(tp, leader_epoch))

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        return self.store.remote_log_size(tp, leader_epoch)

    def on_partition_leadership_changes(self, leaders: Iterable[TopicIdPartition],
                                        followers: Iterable[TopicIdPartition]) -> None:
        for tp in [*leaders, *followers]:
            self.store.maybe_load_partition(tp)
            self.store.mark_initialized(tp)

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None:
        self.stopped.extend(partitions)

    def is_ready(self, tp: TopicIdPartition) -> bool:
        return self.ready_on_write or self.store.is_initialized(tp)

    def close(self) -> None:
        pass


class DirectoryRSM:
    """A RemoteStorageManager over a local directory, one file per object; `down` makes every
    call fail as a store that is unreachable; `fetches` counts segment range reads."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.down = False
        self.fetches = 0
        self.index_fetches = 0

    def _dir(self, md: RemoteLogSegmentMetadata) -> Path:
        return self.root / f"{md.start_offset}-{md.remote_log_segment_id.id.hex()}"

    def _check(self) -> None:
        if self.down:
            raise RemoteStorageError("the store is down")

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes | None:
        self._check()
        d = self._dir(metadata)
        d.mkdir(parents=True)
        with open(data.log_segment, "rb") as f:
            (d / "log").write_bytes(f.read(data.log_segment_size))
        (d / IndexType.OFFSET.value).write_bytes(data.offset_index.read_bytes())
        (d / IndexType.TIMESTAMP.value).write_bytes(data.time_index.read_bytes())
        if data.transaction_index is not None:
            (d / IndexType.TRANSACTION.value).write_bytes(data.transaction_index.read_bytes())
        (d / IndexType.PRODUCER_SNAPSHOT.value).write_bytes(data.producer_snapshot_index.read_bytes())
        (d / IndexType.LEADER_EPOCH.value).write_bytes(data.leader_epoch_index)
        return None

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> bytes:
        self._check()
        self.fetches += 1
        with open(self._dir(metadata) / "log", "rb") as f:
            f.seek(start_position)
            return f.read(-1 if end_position is None else end_position - start_position + 1)

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self._check()
        self.index_fetches += 1
        path = self._dir(metadata) / index_type.value
        if not path.exists():
            raise RemoteResourceNotFoundError(f"{path} does not exist")
        return path.read_bytes()

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._check()

    def close(self) -> None:
        pass


FILESYSTEM_STORAGE = "io.aiven.kafka.tieredstorage.storage.filesystem.FileSystemStorage"
AIVEN_RSM = "io.aiven.kafka.tieredstorage.RemoteStorageManager"


def filesystem_rsm(root: Path, chunk_size: int = 4096) -> RemoteStorageManager:
    """The broker's RSM (trsm's, Aiven's keys) on the filesystem backend."""
    root.mkdir(parents=True, exist_ok=True)
    return create_remote_storage_manager(AIVEN_RSM, {"storage.backend.class": FILESYSTEM_STORAGE,
                                                     "storage.root": str(root), "chunk.size": str(chunk_size)})


class TieredLog:
    """See the module docstring."""

    def __init__(self, tmp: Path, rsm: RemoteStorageManager | None = None,
                 config: LogConfig | None = None, plog: UnifiedLog | None = None) -> None:
        self.plog = plog if plog is not None else UnifiedLog(tmp / "logs" / "t-0", config or LogConfig(), topic="t",
                                                             partition=0, topic_id=TOPIC_ID)
        self.tp = TopicIdPartition(self.plog.topic_id or TOPIC_ID, self.plog.topic, self.plog.partition)
        self.rsm = rsm if rsm is not None else filesystem_rsm(tmp / "remote")
        self.rlmm = MemoryRlmm(ready_on_write=True)
        self.copied: list[RemoteLogSegmentMetadata] = []
        self.original: dict[int, bytes] = {}  # copied segment base offset -> its bytes
        self.epoch = 0

    def append(self, batch: bytes | bytearray, now_ms: int = 2000) -> None:
        self.plog.append_as_leader(bytearray(batch), self.epoch, now_ms)
        self.plog.high_watermark = self.plog.log_end_offset

    def roll(self) -> None:
        self.plog.roll(3000)

    def copy_and_drop(self, n: int) -> None:
        """Copy the first `n` local segments (all rolled) and drop them locally."""
        plog = self.plog
        segments = plog.segments[:n]
        assert len(plog.segments) > n, "the active segment is never copied"
        for i, seg in enumerate(segments):
            end = plog.segments[i + 1].base_offset - 1
            tmp = plog.dir / f"copy-{seg.base_offset}"
            tmp.mkdir()
            txn = [e for e in plog.txn_index.entries if seg.base_offset <= e.last_offset <= end]
            txn_path = None
            if txn:
                txn_path = tmp / "txnindex"
                txn_path.write_bytes(b"".join(_TXN.pack(0, e.producer_id, e.first_offset, e.last_offset,
                                                        e.last_stable_offset) for e in txn))
            (tmp / "index").write_bytes(seg.offset_index.read_bytes())
            (tmp / "timeindex").write_bytes(seg.time_index.read_bytes())
            snapshot = snapshot_file(plog.dir, end + 1)  # the roll's, as of the segment's end
            (tmp / "snapshot").write_bytes(snapshot.read_bytes() if snapshot.exists() else b"")
            epochs = [(e, s) for e, s in plog.leader_epoch_cache.entries() if s <= end]
            checkpoint = f"0\n{len(epochs)}\n" + "".join(f"{e} {s}\n" for e, s in epochs)
            size = seg.size
            with open(seg.log_path, "rb") as f:
                self.original[seg.base_offset] = f.read(size)
            seg_epochs = tuple((e, max(s, seg.base_offset)) for j, (e, s) in enumerate(epochs)
                               if j + 1 == len(epochs) or epochs[j + 1][1] > seg.base_offset)
            md = RemoteLogSegmentMetadata(RemoteLogSegmentId(self.tp, os.urandom(16)), seg.base_offset, end,
                                          seg.max_timestamp_so_far, 1, 0, size, seg_epochs,
                                          txn_idx_empty=txn_path is None)
            self.rsm.copy_log_segment_data(md, LogSegmentData(seg.log_path, tmp / "index", tmp / "timeindex",
                                                              txn_path, tmp / "snapshot",
                                                              checkpoint.encode(), size))
            self.rlmm.add_remote_log_segment_metadata(md)
            self.rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, 0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1))
            self.copied.append(md.with_update(RemoteLogSegmentMetadataUpdate(
                md.remote_log_segment_id, 0, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1)))
        # local retention: the copied segments go, the log start offset stays
        plog.update_highest_offset_in_remote_storage(self.copied[-1].end_offset)
        doomed = plog.increment_local_log_start_offset(plog.segments[n].base_offset)
        assert doomed == segments
        for seg in doomed:
            seg.delete()

    def remote_bytes(self) -> bytes:
        return b"".join(self.original[md.start_offset] for md in self.copied)
