"""The RemoteLogMetadataManager seam (Kafka's org.apache.kafka.server.log.remote.storage
RemoteLogMetadataManager): which segments of a partition are in remote storage.

Kafka's default and pybroker's only implementation is the topic-based one
(pybroker/tiered/topic_based_rlmm.py): events go to `__remote_log_metadata` and every broker
that hosts a replica of a partition consumes them into a RemoteLogMetadataCache
(remote_log_metadata_cache.py).

Calls (all thread-safe; the writes block until the event is durable in the metadata topic *and*
applied to this node's cache, as Kafka's futures complete; call them from worker threads):
- `add_remote_log_segment_metadata(m)`: a COPY_SEGMENT_STARTED segment.
- `update_remote_log_segment_metadata(u)`: a state change (finished, delete started/finished).
- `put_remote_partition_delete_metadata(d)`: a partition's deletion states.
- `remote_log_segment_metadata(tp, epoch, offset)`: the COPY_SEGMENT_FINISHED segment holding
  `offset` written in leader epoch `epoch`, or None.
- `highest_offset_for_epoch(tp, epoch)`: the highest end offset of the finished segments of
  `epoch`, or None.
- `list_remote_log_segments(tp, epoch=None)`: the segments (any state) in ascending start
  offset (of `epoch` only, when given).
- `remote_log_size(tp, epoch)`: the bytes of the segments listed for `epoch` (Kafka's
  remoteLogSize: every state but DELETE_SEGMENT_FINISHED).
- `on_partition_leadership_changes(leaders, followers)`, `on_stop_partitions(partitions)`: which
  partitions this node hosts, so it consumes (or stops consuming) their metadata.
- `is_ready(tp)`: the metadata of `tp` is caught up (Kafka's isReady), so the reads above may
  be trusted.
- `close()`.

Errors: RemoteStorageError (remote_storage_manager.py) when a write cannot be made durable;
RemoteResourceNotFoundError when the partition's metadata is not known here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from pybroker.log.remote.remote_log_segment_metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)


class RemoteLogMetadataManager(Protocol):
    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None: ...

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None: ...

    def put_remote_partition_delete_metadata(self, metadata: RemotePartitionDeleteMetadata) -> None: ...

    def remote_log_segment_metadata(self, tp: TopicIdPartition, epoch_for_offset: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None: ...

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None: ...

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]: ...

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int: ...

    def on_partition_leadership_changes(self, leaders: Iterable[TopicIdPartition],
                                        followers: Iterable[TopicIdPartition]) -> None: ...

    def on_stop_partitions(self, partitions: Iterable[TopicIdPartition]) -> None: ...

    def is_ready(self, tp: TopicIdPartition) -> bool: ...

    def close(self) -> None: ...


__all__ = ["RemoteLogMetadataManager"]
