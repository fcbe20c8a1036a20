"""The share-state persister: what a share-partition leader and the group coordinator ask of the
share coordinator (Kafka's server-common `org.apache.kafka.server.share.persister.Persister`).

Format: the state of one share partition of one group is (state epoch, start offset, batches of
(first offset, last offset, delivery state, delivery count)). The delivery states persisted are
Kafka's RecordState ids: 0 AVAILABLE, 2 ACKNOWLEDGED, 4 ARCHIVED (an ACQUIRED record is persisted
as AVAILABLE with its delivery count: a lock does not survive its leader). These are the values of
the StateBatches of Read/WriteShareGroupState and of the ShareSnapshot/ShareUpdate records.

Concurrency: every method is a trio coroutine called on the broker's event loop; a call answers
once the share coordinator has answered (for a write: once the record is replicated, as Kafka's
coordinator runtime answers). Errors come back as Kafka error codes, never as exceptions, so one
partition's failure does not fail its neighbours in a batched request.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Protocol

# Kafka's RecordState ids (org.apache.kafka.server.share.fetch / coordinator.share)
AVAILABLE = 0
ACQUIRED = 1
ACKNOWLEDGED = 2
ARCHIVED = 4

# the start offset of a share partition whose state the group coordinator has not initialized
UNINITIALIZED_START_OFFSET = -1
# state epoch and leader epoch of a share partition never written
NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class StateBatch:
    """A run of offsets with one delivery state and delivery count (Kafka's PersisterStateBatch)."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """ReadShareGroupState for one partition. With an error, the other fields mean nothing."""

    error: int
    state_epoch: int = NO_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    batches: tuple[StateBatch, ...] = field(default_factory=tuple)
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """ReadShareGroupStateSummary for one partition (the admin view: no batches)."""

    error: int
    state_epoch: int = NO_EPOCH
    leader_epoch: int = NO_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    error_message: str | None = None


class Persister(Protocol):
    """One share partition per call; the implementation batches calls to one coordinator."""

    async def initialize_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                               state_epoch: int, start_offset: int) -> int:
        """InitializeShareGroupState: (re)start the partition's state at `start_offset` with a
        new state epoch; the error code (0 = done)."""
        ...

    async def read_state(self, group_id: str, topic_id: uuid.UUID, partition: int,
                         leader_epoch: int) -> ReadResult:
        """ReadShareGroupState, as a new share-partition leader of `leader_epoch` loads it
        (the coordinator fences a lower leader epoch with FENCED_LEADER_EPOCH)."""
        ...

    async def write_state(self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int,
                          leader_epoch: int, start_offset: int, batches: list[StateBatch]) -> int:
        """WriteShareGroupState: the changed batches (and the new start offset, or -1 when
        unchanged); the error code (FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH, ...)."""
        ...

    async def delete_state(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """DeleteShareGroupState (the group or its offsets for the topic are deleted)."""
        ...

    async def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int,
                           leader_epoch: int) -> SummaryResult:
        """ReadShareGroupStateSummary (DescribeShareGroupOffsets)."""
        ...
