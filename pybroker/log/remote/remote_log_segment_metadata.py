"""The metadata of one remote log segment (Kafka's org.apache.kafka.server.log.remote.storage
RemoteLogSegmentId, RemoteLogSegmentMetadata, RemoteLogSegmentMetadataUpdate,
RemotePartitionDeleteMetadata and their state enums), as plain immutable values.

A segment's life (RemoteLogSegmentState; the ids are Kafka's, written in
`__remote_log_metadata` records): COPY_SEGMENT_STARTED (0) -> COPY_SEGMENT_FINISHED (1) ->
DELETE_SEGMENT_STARTED (2) -> DELETE_SEGMENT_FINISHED (3); a copy that fails goes from 0 to 2.
A partition's deletion (RemotePartitionDeleteState): DELETE_PARTITION_MARKED (0) ->
DELETE_PARTITION_STARTED (1) -> DELETE_PARTITION_FINISHED (2).

Offsets are inclusive: `start_offset` is the segment's base offset, `end_offset` its last
offset. `segment_leader_epochs` maps each leader epoch with records in the segment to its first
offset there (ascending). Concurrency: immutable values, any thread.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace


class RemoteLogSegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


# Kafka's RemoteLogSegmentState.isValidTransition
_SEGMENT_NEXT = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: set(),
}


def is_valid_transition(src: RemoteLogSegmentState | None, dst: RemoteLogSegmentState) -> bool:
    if src is None:
        return dst == RemoteLogSegmentState.COPY_SEGMENT_STARTED
    # a self-transition is valid (Kafka: idempotency for retries and failover)
    return src == dst or dst in _SEGMENT_NEXT[src]


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """Kafka's TopicIdPartition; `topic_id` is the 16 raw bytes of the Uuid."""

    topic_id: bytes
    topic: str
    partition: int

    def __str__(self) -> str:  # Kafka's TopicIdPartition.toString: "<Uuid>:<topic>-<partition>"
        from pybroker.log.meta_properties import uuid_to_str

        return f"{uuid_to_str(self.topic_id)}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    topic_id_partition: TopicIdPartition
    id: bytes  # a random Uuid per copy attempt (16 bytes)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]  # (epoch, first offset), ascending
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    # KIP-1058 (RemoteLogSegmentMetadataRecord v1): the segment has no transaction index data
    txn_idx_empty: bool = False

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    def with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """Kafka's createWithUpdates: the update's state, broker, event time and custom metadata."""
        return replace(self, state=update.state, broker_id=update.broker_id,
                       event_timestamp_ms=update.event_timestamp_ms,
                       custom_metadata=update.custom_metadata if update.custom_metadata is not None
                       else self.custom_metadata)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


__all__ = ["RemoteLogSegmentId", "RemoteLogSegmentMetadata", "RemoteLogSegmentMetadataUpdate",
           "RemoteLogSegmentState", "RemotePartitionDeleteMetadata", "RemotePartitionDeleteState",
           "TopicIdPartition", "is_valid_transition"]
